"""Send the eval's prompts through the router, ``parallel`` in flight, greedy, with hard timeouts.

Why async httpx: one event loop keeps ``--parallel 128`` requests in flight on one core with
pooled keep-alive connections, so the client is never the bottleneck of a GPU deployment (and a
stand-in server answers 1,319 questions in seconds). A transport failure after retries is a
deployment failure (exit 3), never a wrong answer; an HTTP 4xx (e.g. prompt too long) scores the
question as unanswered, like SGLang's own sampler.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from kvdoctor._exceptions import EvalTimeout, MalformedReply, RequestFailed
from kvdoctor.deploy.http import verify_for
from kvdoctor.deploy.presets import Api

APIS = tuple(a.value for a in Api)
RETRIES = 2
RETRY_BACKOFF_S = 0.25
SHARD = 8  # connections per pooled client (see complete_all)


@dataclass(frozen=True)
class Sampling:
    """Greedy decoding, sent explicitly (SGLang otherwise takes the model's generation_config)."""

    max_new_tokens: int
    stop: tuple[str, ...]
    model: str
    api: str = "completions"
    temperature: float = 0.0


@dataclass(frozen=True)
class Completion:
    text: str
    completion_tokens: int | None
    finish_reason: str | None
    latency_s: float
    error: str | None = None


def request_for(prompt: str, s: Sampling) -> tuple[str, dict[str, object]]:
    """The path and body SGLang expects (``/v1/completions`` as its gate does, or ``/generate``)."""
    if s.api == "generate":
        params = {"temperature": s.temperature, "max_new_tokens": s.max_new_tokens, "stop": list(s.stop)}
        return "/generate", {"text": prompt, "sampling_params": params}
    body = {
        "model": s.model,
        "prompt": prompt,
        "temperature": s.temperature,
        "max_tokens": s.max_new_tokens,
        "stop": list(s.stop),
    }
    return "/v1/completions", body


def parse_reply(api: str, payload: object) -> tuple[str, int | None, str | None]:
    """(text, completion tokens, finish reason) from either response shape.

    Raises ``MalformedReply`` for anything else (a proxy's HTML page, a list, ``choices: null``):
    a router that answers 200 with garbage must cost a question, not the run.
    """
    if not isinstance(payload, dict):
        raise MalformedReply(f"reply is a JSON {type(payload).__name__}, not an object")
    if api == "generate":
        meta = payload.get("meta_info")
        meta = meta if isinstance(meta, dict) else {}
        text, finish = payload.get("text"), meta.get("finish_reason")
        finish = finish.get("type") if isinstance(finish, dict) else finish
        tokens = meta.get("completion_tokens")
    else:
        choices = payload.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise MalformedReply(f"'choices' is {_short(choices)}, not a list of objects")
        usage = payload.get("usage")
        tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
        text, finish = choices[0].get("text"), choices[0].get("finish_reason")
    if not isinstance(text, str):
        raise MalformedReply(f"the reply's text is {_short(text)}, not a string")
    tokens = tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None
    return text, tokens, finish if isinstance(finish, str) else None


def _short(value: object) -> str:
    return repr(value)[:80]


async def complete(client: httpx.AsyncClient, prompt: str, s: Sampling) -> Completion:
    path, body = request_for(prompt, s)
    last_error = ""
    for attempt in range(RETRIES + 1):
        if attempt:
            await asyncio.sleep(RETRY_BACKOFF_S * 2 ** (attempt - 1))
        started = time.perf_counter()
        try:
            response = await client.post(path, json=body)
        except httpx.TimeoutException as exc:
            raise RequestFailed(f"POST {path} timed out ({type(exc).__name__})") from exc
        except httpx.TransportError as exc:
            last_error = f"{type(exc).__name__}: {exc}"
            continue
        latency = time.perf_counter() - started
        if response.status_code >= 500 or response.status_code == 429:
            last_error = f"HTTP {response.status_code}: {response.text[:200]}"
            continue
        if response.status_code >= 400:
            error = f"HTTP {response.status_code}: {response.text[:200]}"
            return Completion("", None, None, latency, error)
        try:
            text, tokens, finish = parse_reply(s.api, response.json())
        except ValueError as exc:  # JSONDecodeError and MalformedReply
            error = f"malformed reply from POST {path}: {exc}; body: {response.text[:200]!r}"
            return Completion("", None, None, latency, error)
        return Completion(text, tokens, finish, latency)
    raise RequestFailed(f"POST {path} failed {RETRIES + 1} times; last: {last_error}")


def make_client(base_url: str, connections: int, request_timeout_s: float) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    timeout = httpx.Timeout(request_timeout_s, connect=min(10.0, request_timeout_s))
    return httpx.AsyncClient(base_url=base_url, limits=limits, timeout=timeout, verify=verify_for(base_url))


async def complete_all(
    base_url: str,
    prompts: Sequence[str],
    sampling: Sampling,
    *,
    parallel: int,
    request_timeout_s: float,
    time_left_s: float | None = None,
    run_timeout_s: float | None = None,
    what: str = "the eval",
    on_done: Callable[[int, Completion], None] | None = None,
    watchdog: Callable[[], None] | None = None,
) -> list[Completion]:
    """Every prompt's completion, in order, from ``parallel`` workers.

    Workers share clients of ``SHARD`` connections each: httpcore's pool scans all of its
    connections for every request, so one pool of 128 costs ~quadratic CPU per request, while
    eight pools of 16 keep the client far below the server's cost. ``watchdog`` is called every
    0.1 s and may raise (a server died) to stop the eval at once; ``time_left_s`` bounds the eval.
    """
    results: list[Completion | None] = [None] * len(prompts)
    pending = iter(range(len(prompts)))
    workers = min(parallel, len(prompts)) or 1
    clients = [
        make_client(base_url, min(SHARD, workers - start), request_timeout_s) for start in range(0, workers, SHARD)
    ]

    async def worker(number: int) -> None:
        http = clients[number // SHARD]
        for index in pending:
            done = await complete(http, prompts[index], sampling)
            results[index] = done
            if on_done is not None:
                on_done(index, done)

    # Read only when the eval ran out of time, which needs a TIME_LEFT_S: without one there is no budget to name.
    budget = f"--timeout {run_timeout_s:g} s" if run_timeout_s else f"{time_left_s or 0:g} s"
    try:
        await run_watched(
            asyncio.gather(*(worker(n) for n in range(workers))),
            watchdog,
            time_left_s,
            f"{what} did not finish within {budget}",
        )
        return [r for r in results if r is not None]
    finally:
        await asyncio.gather(*(c.aclose() for c in clients), return_exceptions=True)


async def run_watched(
    work: Awaitable[Any], watchdog: Callable[[], None] | None, time_left_s: float | None, timeout_message: str
) -> None:
    """Await WORK (the gathered workers of one eval) beside WATCHDOG, called every 0.1 s, within TIME_LEFT_S.

    The first to end decides: the watchdog's exception (a server died) stops the work at once; a failed
    request is explained by the watchdog first when it has something to say (a dead server explains a
    failed request better than the request); no end in time is ``EvalTimeout(timeout_message)``. Both
    tasks are cancelled and awaited on every path. pd-eval's GSM8K client and consistency's share it.
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_watch(watchdog))
    try:
        finished, _ = await asyncio.wait({task, watcher}, timeout=time_left_s, return_when=asyncio.FIRST_COMPLETED)
        if not finished:
            raise EvalTimeout(timeout_message)
        if watcher in finished:
            watcher.result()  # re-raises what the watchdog raised
        if task.exception() is not None and watchdog is not None:
            watchdog()
        task.result()
    finally:
        for pending in (task, watcher):
            pending.cancel()
        await asyncio.gather(task, watcher, return_exceptions=True)


async def _watch(watchdog: Callable[[], None] | None) -> None:
    while True:
        await asyncio.sleep(0.1)
        if watchdog is not None:
            watchdog()
