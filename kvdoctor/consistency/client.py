"""Send token-id prompts to SGLang's ``/generate``: greedy, fixed length, logprobs and top-2 on.

The same bounded-concurrency shape as pd-eval's client (its pooled ``make_client`` and watchdog are
reused): ``concurrency`` requests in flight, a watchdog that stops the run the moment a server dies,
one deadline for the whole run. ``ignore_eos`` is never sent: with it SGLang reserves each request's
whole budget up front and never retracts (``srt/managers/schedule_policy.py:787``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from kvdoctor._exceptions import MalformedReply, RequestFailed
from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.workload import Workload
from kvdoctor.pd.client import RETRIES, make_client, run_watched


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
    logprobs = tuple(float(e[0]) if e[0] is not None else float("nan") for e in entries)
    margins: list[float | None] = []
    for top in meta.get("output_top_logprobs") or []:
        values = sorted((float(t[0]) for t in top or [] if t and t[0] is not None), reverse=True)
        margins.append(values[0] - values[1] if len(values) >= 2 else None)
    finish = meta.get("finish_reason")
    kind = finish.get("type", "") if isinstance(finish, dict) else str(finish or "")
    return Generation(tokens, logprobs, tuple(margins), kind)


async def generate(http: httpx.AsyncClient, prompt: Sequence[int], w: Workload) -> Generation:
    last = ""
    for _ in range(RETRIES + 1):
        try:
            response = await http.post("/generate", json=body(prompt, w))
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}"
            continue
        if response.status_code >= 500:
            last = f"HTTP {response.status_code}: {response.text[:200]}"
            continue
        if response.status_code != 200:
            raise RequestFailed(f"POST /generate answered HTTP {response.status_code}: {response.text[:300]}")
        try:
            return parse(response.json())
        except (ValueError, TypeError, IndexError) as exc:
            raise RequestFailed(f"POST /generate: unreadable reply: {exc}") from None
    raise RequestFailed(f"POST /generate failed {RETRIES + 1} times; last: {last}")


async def generate_all(
    base_url: str,
    prompts: Sequence[Sequence[int]],
    w: Workload,
    *,
    request_timeout_s: float,
    time_left_s: float,
    what: str,
    watchdog: Callable[[], None] | None = None,
) -> list[Generation]:
    """Every prompt's generation, in order, ``w.concurrency`` in flight."""
    results: list[Generation | None] = [None] * len(prompts)
    pending = iter(range(len(prompts)))
    workers = max(1, min(w.concurrency, len(prompts)))
    http = make_client(base_url, workers, request_timeout_s)

    async def worker() -> None:
        for index in pending:
            results[index] = await generate(http, prompts[index], w)

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
