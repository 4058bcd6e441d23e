"""Send token-id prompts to SGLang's ``/generate`` (or vLLM's ``/v1/completions``): greedy, fixed length,
logprobs and top-2 on.

The same bounded-concurrency shape as pd-eval's client (its pooled ``make_client`` and watchdog are
reused): ``concurrency`` requests in flight, a watchdog that stops the run the moment a server dies,
one deadline for the whole run. ``ignore_eos`` is never sent: with it SGLang reserves each request's
whole budget up front and never retracts (``srt/managers/schedule_policy.py:787``). vLLM gets the same
request through its OpenAI completions API: the prompt as token ids, ``temperature`` 0, ``max_tokens``,
``logprobs`` top-2 and ``return_tokens_as_token_ids`` (its tokens come back as ``token_id:N``).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from kvdoctor._exceptions import MalformedReply, RequestFailed
from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.workload import Workload
from kvdoctor.deploy.client import RETRIES, make_client, run_watched


def body(prompt: Sequence[int], w: Workload) -> dict[str, Any]:
    return {
        "input_ids": list(prompt),
        "sampling_params": {"temperature": 0.0, "max_new_tokens": w.max_new_tokens},
        "return_logprob": True,
        "top_logprobs_num": w.top_logprobs,
    }


def parse(payload: Any) -> Generation:
    """One ``/generate`` reply as a :class:`Generation`; ``MalformedReply`` when it is not SGLang's shape."""
    if isinstance(payload, list) and len(payload) == 1:
        payload = payload[0]
    if not isinstance(payload, dict) or not isinstance(payload.get("meta_info"), dict):
        raise MalformedReply(f"no meta_info in the reply: {str(payload)[:200]}")
    meta = payload["meta_info"]
    entries = meta.get("output_token_logprobs")
    if not isinstance(entries, list):
        raise MalformedReply("no output_token_logprobs in meta_info (was return_logprob honoured?)")
    tokens = tuple(int(e[1]) for e in entries)
    ids = payload.get("output_ids")
    if isinstance(ids, list) and [int(t) for t in ids] != list(tokens):
        raise MalformedReply("output_ids and output_token_logprobs disagree")
    logprobs = tuple(_logprob(e[0]) for e in entries)
    margins = [_margin(t[0] for t in top or [] if t) for top in meta.get("output_top_logprobs") or []]
    finish = meta.get("finish_reason")
    kind = finish.get("type", "") if isinstance(finish, dict) else str(finish or "")
    return Generation(
        tokens, logprobs, tuple(margins), kind, _count(meta.get("cached_tokens"), "meta_info.cached_tokens")
    )


def _logprob(value: Any) -> float:
    """One token's logprob as the reply says it. A ``null`` (what SGLang's orjson writes for a NaN) becomes NaN and
    ``NaN``/``Infinity`` stay what they are: kept, not refused here, so the comparison names the request and token
    and the logprobs gate is red (``kvdoctor.consistency.compare``). A string or a bool is no logprob."""
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MalformedReply(f"a logprob is {str(value)[:40]!r}, not a number")
    return float(value)


def _margin(values: Iterable[Any]) -> float | None:
    """Top-1 minus top-2 of the finite numbers among VALUES (None with fewer than two): reported beside a
    divergence, never gated; a null or NaN among them must not turn it into NaN."""
    ranked = sorted((float(v) for v in values if _finite(v)), reverse=True)
    return ranked[0] - ranked[1] if len(ranked) >= 2 else None


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


VLLM_PATH = "/v1/completions"
TOKEN_PREFIX = "token_id:"


def completion_body(prompt: Sequence[int], w: Workload, model: str) -> dict[str, Any]:
    """The same greedy request as :func:`body`, for vLLM's ``/v1/completions``."""
    return {
        "model": model,
        "prompt": list(prompt),
        "max_tokens": w.max_new_tokens,
        "temperature": 0.0,
        "logprobs": w.top_logprobs,
        "return_tokens_as_token_ids": True,
    }


def _token_id(token: Any) -> int:
    if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX):
        raise MalformedReply(
            f"token {str(token)[:40]!r} is not {TOKEN_PREFIX}N (was return_tokens_as_token_ids honoured?)"
        )
    return int(token.removeprefix(TOKEN_PREFIX))


def parse_completion(payload: Any) -> Generation:
    """One ``/v1/completions`` reply as a :class:`Generation`; ``MalformedReply`` when it is not vLLM's shape."""
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        raise MalformedReply(f"no single choice in the reply: {str(payload)[:200]}")
    choice = choices[0]
    lp = choice.get("logprobs")
    if not isinstance(lp, dict) or not isinstance(lp.get("tokens"), list):
        raise MalformedReply("no logprobs.tokens in the choice (was logprobs honoured?)")
    tokens = tuple(_token_id(t) for t in lp["tokens"])
    values = lp.get("token_logprobs") or []
    if len(values) != len(tokens):
        raise MalformedReply(f"{len(tokens)} tokens but {len(values)} token_logprobs")
    logprobs = tuple(_logprob(v) for v in values)
    margins = [_margin((top or {}).values()) for top in lp.get("top_logprobs") or []]
    return Generation(tokens, logprobs, tuple(margins), str(choice.get("finish_reason") or ""), _cached(payload))


def _cached(payload: dict[str, Any]) -> int | None:
    """``usage.prompt_tokens_details.cached_tokens``: the prompt tokens vLLM's prefix cache served this request
    (only with ``--enable-prompt-tokens-details``; entrypoints/openai/completion/serving.py:453-456)."""
    usage = payload.get("usage")
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return _count(cached, "usage.prompt_tokens_details.cached_tokens")


def _count(cached: Any, where: str) -> int | None:
    """A reply's cached prompt tokens (None when the reply does not say); ``MalformedReply`` when it is no count.
    SGLang says it in every ``/generate`` reply's ``meta_info`` (the prompt tokens its radix cache served this request;
    cited as ``CACHED_TOKENS`` in :mod:`kvdoctor.consistency.servers.sglang.prefix_cache`), vLLM in ``usage``
    (:func:`_cached`)."""
    if cached is None:
        return None
    if not isinstance(cached, int) or isinstance(cached, bool) or cached < 0:
        raise MalformedReply(f"{where} is {cached!r}, not a token count")
    return cached


@dataclass(frozen=True)
class Api:
    """One server's generation endpoint: its path, request body and reply parser."""

    path: str
    make_body: Callable[[Sequence[int], Workload], dict[str, Any]]
    parse: Callable[[Any], Generation]


SGLANG_API = Api("/generate", body, parse)


def vllm_api(model: str) -> Api:
    return Api(VLLM_PATH, lambda prompt, w: completion_body(prompt, w, model), parse_completion)


async def generate(http: httpx.AsyncClient, prompt: Sequence[int], w: Workload, api: Api = SGLANG_API) -> Generation:
    last = ""
    for _ in range(RETRIES + 1):
        try:
            response = await http.post(api.path, json=api.make_body(prompt, w))
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}"
            continue
        if response.status_code >= 500:
            last = f"HTTP {response.status_code}: {response.text[:200]}"
            continue
        if response.status_code != 200:
            raise RequestFailed(f"POST {api.path} answered HTTP {response.status_code}: {response.text[:300]}")
        try:
            return api.parse(response.json())
        except (ValueError, TypeError, IndexError) as exc:
            raise RequestFailed(f"POST {api.path}: unreadable reply: {exc}") from None
    raise RequestFailed(f"POST {api.path} failed {RETRIES + 1} times; last: {last}")


async def generate_all(
    base_url: str,
    prompts: Sequence[Sequence[int]],
    w: Workload,
    *,
    request_timeout_s: float,
    time_left_s: float,
    what: str,
    watchdog: Callable[[], None] | None = None,
    api: Api = SGLANG_API,
) -> list[Generation]:
    """Every prompt's generation, in order, ``w.concurrency`` in flight."""
    results: list[Generation | None] = [None] * len(prompts)
    pending = iter(range(len(prompts)))
    workers = max(1, min(w.concurrency, len(prompts)))
    http = make_client(base_url, workers, request_timeout_s)

    async def worker() -> None:
        for index in pending:
            results[index] = await generate(http, prompts[index], w, api)

    try:
        await run_watched(
            asyncio.gather(*(worker() for _ in range(workers))),
            watchdog,
            time_left_s,
            f"{what} did not finish within the run's --timeout",
        )
        return [r for r in results if r is not None]
    finally:
        await http.aclose()
