"""How much of a pd-eval's wall time is the client's own doing?

Against an instant server (a separate process, so it never shares the client's interpreter lock),
the eval client sends every scored GSM8K question at ``--parallel`` in flight. Measured in one
run, side by side:

- ``sharded``: kvdoctor's client (pools of ``client.SHARD`` connections);
- ``single pool``: the naive client, one httpx pool holding every connection;

each as wall time, questions/s and the client's CPU per request (``time.process_time`` of this
process only). Data preparation and scoring are timed too. No number here is a pass/fail
threshold; they are measurements to compare across machines and commits. SIGTERM or Ctrl-C stops
the instant server before the bench exits (128 + the signal number).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from kvdoctor._exceptions import DeploymentError, GateFailure
from kvdoctor.deploy import client
from kvdoctor.deploy.ports import free_ports
from kvdoctor.deploy.signals import signals_ignored, signals_raise
from kvdoctor.pd import gsm8k
from kvdoctor.pd.result import record, score


@dataclass(frozen=True)
class LoopTiming:
    name: str
    wall_s: float
    client_cpu_s: float
    requests: int

    @property
    def per_second(self) -> float:
        return self.requests / self.wall_s

    @property
    def cpu_us_per_request(self) -> float:
        return 1e6 * self.client_cpu_s / self.requests

    def to_dict(self) -> dict[str, float | str | int]:
        return {
            **asdict(self),
            "questions_per_s": self.per_second,
            "client_cpu_us_per_request": self.cpu_us_per_request,
        }


@dataclass(frozen=True)
class BenchResult:
    questions: int
    parallel: int
    repeats: int
    prepare_s: float
    score_s: float
    loops: list[LoopTiming]

    def to_dict(self) -> dict[str, object]:
        return {
            "questions": self.questions,
            "parallel": self.parallel,
            "repeats": self.repeats,
            "prepare_s": self.prepare_s,
            "score_s": self.score_s,
            "loops": [loop.to_dict() for loop in self.loops],
        }


# -- the instant server ---------------------------------------------------------------------
class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # read by listen() in __init__: a backlog of 5 drops SYNs at 128


def _serve(port: int, data_path: str) -> None:
    """Answer every question with its gold answer at once (separate process)."""
    answers = {}
    for r in gsm8k.load_examples(Path(data_path)):
        answers[r.question] = " " + r.answer
    counter = {"n": 0}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def reply(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/metrics":
                text = f'sglang:num_retracted_requests_total{{tp_rank="0"}} {counter["n"]}\n'
                self.reply(200, text.encode(), "text/plain")
            else:
                self.reply(200, b"{}")

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            prompt = str(body.get("prompt") or body.get("text"))
            question = prompt[prompt.rfind("Question: ") + 10 :].rsplit("\nAnswer:", 1)[0]
            text = answers.get(question, " 0")
            counter["n"] += 1
            out = {"choices": [{"text": text, "finish_reason": "stop"}], "usage": {"completion_tokens": len(text) // 4}}
            self.reply(200, json.dumps(out).encode())

    _Server(("127.0.0.1", port), Handler).serve_forever()


class InstantServer:
    """Context manager: the instant server in a spawned process, ready on enter."""

    def __init__(self, data_path: Path) -> None:
        self.port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{self.port}"
        ctx = multiprocessing.get_context("spawn")
        self.process = ctx.Process(target=_serve, args=(self.port, str(data_path)), daemon=True)

    def __enter__(self) -> InstantServer:
        try:
            self.process.start()
            self._wait_ready()
        except BaseException:  # a signal mid-start must not leave the server behind
            self.__exit__()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.05)
        raise DeploymentError("the bench's instant server did not start")

    def __exit__(self, *exc: object) -> None:
        if self.process.pid is None:
            return
        with signals_ignored():  # half a teardown would leave the server running
            self.process.terminate()
            self.process.join(timeout=10)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(timeout=10)


# -- the loops ------------------------------------------------------------------------------
async def _single_pool(
    url: str, prompts: Sequence[str], sampling: client.Sampling, parallel: int, watchdog: Callable[[], None]
) -> list[client.Completion]:
    """The naive client: one pool of ``parallel`` connections and a semaphore."""
    gate = asyncio.Semaphore(parallel)
    async with client.make_client(url, parallel, 60.0) as http:

        async def one(prompt: str) -> client.Completion:
            async with gate:
                return await client.complete(http, prompt, sampling)

        async def watch() -> None:
            while True:
                await asyncio.sleep(0.1)
                watchdog()

        work = asyncio.gather(*(one(p) for p in prompts))
        watcher = asyncio.ensure_future(watch())
        try:
            done, _ = await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if watcher in done:
                watcher.result()  # re-raises the signal the watchdog saw
            return list(work.result())
        finally:
            for task in (work, watcher):
                task.cancel()
            await asyncio.gather(work, watcher, return_exceptions=True)


def _timed(name: str, run: Callable[[], list[client.Completion]]) -> LoopTiming:
    cpu, wall = time.process_time(), time.perf_counter()
    done = run()
    return LoopTiming(name, time.perf_counter() - wall, time.process_time() - cpu, len(done))


def bench(
    data_path: Path, *, parallel: int = 128, num_questions: int | None = None, num_shots: int = 5, repeats: int = 3
) -> BenchResult:
    started = time.perf_counter()
    questions = gsm8k.select(gsm8k.load_examples(data_path), num_shots, num_questions)
    prepare_s = time.perf_counter() - started
    prompts = [q.prompt for q in questions]
    sampling = client.Sampling(512, gsm8k.STOP, "bench")
    loops: dict[str, list[LoopTiming]] = {"sharded": [], "single pool": []}
    done: list[client.Completion] = []
    # SIGTERM/Ctrl-C become ``Interrupted`` (checked by each loop's watchdog, see
    # kvdoctor.deploy.signals), so the ``with`` unwinds and the instant server is stopped.
    with signals_raise() as latch, InstantServer(data_path) as server:
        for _ in range(repeats):

            def sharded() -> list[client.Completion]:
                nonlocal done
                with latch.deferred():
                    done = asyncio.run(
                        client.complete_all(
                            server.url, prompts, sampling, parallel=parallel, request_timeout_s=60, watchdog=latch.check
                        )
                    )
                return done

            def single() -> list[client.Completion]:
                with latch.deferred():
                    return asyncio.run(_single_pool(server.url, prompts, sampling, parallel, latch.check))

            loops["sharded"].append(_timed("sharded", sharded))
            loops["single pool"].append(_timed("single pool", single))
    started = time.perf_counter()
    records = [record(q, c) for q, c in zip(questions, done, strict=True)]
    accuracy = score(records, 1.0).accuracy
    score_s = time.perf_counter() - started
    if accuracy < 0.99:  # the instant server answers gold: anything else is a broken client
        raise GateFailure(f"bench client scored {accuracy:.3f} against gold answers")
    medians = [_median(name, runs) for name, runs in loops.items()]
    return BenchResult(len(questions), parallel, repeats, prepare_s, score_s, medians)


def _median(name: str, runs: list[LoopTiming]) -> LoopTiming:
    return LoopTiming(
        name,
        statistics.median(r.wall_s for r in runs),
        statistics.median(r.client_cpu_s for r in runs),
        runs[0].requests,
    )
