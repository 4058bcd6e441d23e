"""Stand-in for ``python -m sglang.launch_server`` in PD mode: SGLang 0.5.23's flags and wire format.

Run: ``python tests/pd/standins/server.py --model-path M --disaggregation-mode decode --port P …``.
Unknown flags are rejected (exit 2, as argparse does), so a typo in a launch plan fails a test.
Behaviour knobs (see common.py for the env naming): ACCURACY (fraction answered right, default
1), ANSWER=none (never a number), RETRACT_EVERY (decode: one retraction per N requests, default
4, 0 = never), CRASH_AFTER (exit after N requests), EXIT_AT_START (exit code at start),
UNHEALTHY_PROBES (503 for the first N health probes), NEVER_HEALTHY, HANG_SECONDS (each
generation after the first HANG_AFTER waits this long), ESCAPE=setsid|daemon|daemon-noenv with
ESCAPE_PIDFILE, IGNORE_SIGTERM, DATA, NEVER_LISTEN (stay alive without ever binding the port: a
server still loading its model), INFO_HANG_SECONDS (``/server_info`` answers this late),
RETRACTED_METRIC (decode: the retraction counter's value on successive ``/metrics`` scrapes, comma
separated, the last repeating: ``+Inf``, ``NaN``, ``-1``, or ``9,3`` for a counter that went backwards).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
import uuid
from pathlib import Path

from common import (
    DEFAULT_DATA,
    AnswerBook,
    FastServer,
    JsonHandler,
    Knobs,
    exit_now,
    log,
    log_line,
    spawn_escapee,
)

VERSION = "0.5.23-standin"
TRANSFER_BACKENDS = ("mooncake", "nixl", "ascend", "fake", "mori", "mooncake_tcp")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="sglang.launch_server (stand-in)")
    p.add_argument("--model-path", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--disaggregation-mode", choices=("null", "prefill", "decode"), default="null")
    p.add_argument("--disaggregation-bootstrap-port", type=int, default=8998)
    p.add_argument("--disaggregation-transfer-backend", choices=TRANSFER_BACKENDS, default="mooncake")
    p.add_argument("--disaggregation-ib-device")
    p.add_argument("--disaggregation-decode-retraction-backup", choices=("cpu_tensor", "host_pool"))
    p.add_argument("--tp-size", "--tp", type=int, default=1, dest="tp_size")
    p.add_argument("--base-gpu-id", type=int, default=0)
    p.add_argument("--nccl-port", type=int)
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--max-total-tokens", type=int)
    p.add_argument("--enable-hierarchical-cache", action="store_true")
    p.add_argument("--hicache-size", type=int)
    p.add_argument("--quantization")
    p.add_argument("--attention-backend")
    p.add_argument("--page-size", type=int)
    p.add_argument("--fp4-gemm-backend")
    p.add_argument("--moe-runner-backend")
    p.add_argument("--mamba-radix-cache-strategy")
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--swa-full-tokens-ratio", type=float)
    p.add_argument("--mamba-full-memory-ratio", type=float)
    p.add_argument("--kv-cache-dtype")
    p.add_argument("--served-model-name")
    p.add_argument("--log-level", default="info")
    return p.parse_args(argv)


class State:
    """Counters shared by the handler threads."""

    def __init__(self, args: argparse.Namespace, knobs: Knobs) -> None:
        self.args = args
        self.knobs = knobs
        self.lock = threading.Lock()
        self.requests = 0
        self.retracted = 0
        self.probes = 0
        self.book = AnswerBook(
            Path(knobs.raw("DATA") or DEFAULT_DATA), knobs.number("ACCURACY", 1.0), knobs.raw("ANSWER", "gold")
        )
        self.retract_every = int(knobs.number("RETRACT_EVERY", 4)) if self.is_decode else 0
        self.crash_after = int(knobs.number("CRASH_AFTER", 0))
        self.hang_s = knobs.number("HANG_SECONDS", 0.0)
        self.hang_after = int(knobs.number("HANG_AFTER", 0))
        self.metric_values = [v for v in knobs.raw("RETRACTED_METRIC").split(",") if v] if self.is_decode else []
        self.scrapes = 0

    @property
    def is_decode(self) -> bool:
        return self.args.disaggregation_mode == "decode"

    @property
    def model(self) -> str:
        return self.args.served_model_name or self.args.model_path

    def healthy(self) -> bool:
        with self.lock:
            self.probes += 1
            probes = self.probes
        if self.knobs.flag("NEVER_HEALTHY"):
            return False
        return probes > self.knobs.number("UNHEALTHY_PROBES", 0)

    def admit(self) -> None:
        """Count a generation request; crash or retract as the knobs say."""
        with self.lock:
            self.requests += 1
            n = self.requests
            retract = self.retract_every > 0 and n % self.retract_every == 0
            if retract:
                self.retracted += 1
        log(f"received generate request #{n}")
        if self.crash_after and n > self.crash_after:
            exit_now(3, f"stand-in crashing after {self.crash_after} requests")
        if retract:
            self.log_retraction()
        if self.hang_s and n > self.hang_after:
            time.sleep(self.hang_s)

    def log_retraction(self) -> None:
        # SGLang logs from every TP rank (prefix " TPn" when tp > 1), the same event each time.
        ranks = range(self.args.tp_size) if self.args.tp_size > 1 else [None]
        for rank in ranks:
            prefix = f" TP{rank}" if rank is not None else ""
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            log_line(
                f"[{stamp}{prefix}] KV cache pool is full. Retract requests. "
                "#retracted_reqs: 1, #new_tokens_gained: 1024, "
                "#new_token_ratio: 0.7000 -> 0.8000"
            )

    def metrics(self) -> str:
        lines = [
            "# HELP sglang:num_retracted_requests_total Total number of retracted requests.",
            "# TYPE sglang:num_retracted_requests_total counter",
        ]
        engine = "decode" if self.is_decode else "prefill"
        with self.lock:
            scrape, self.scrapes = self.scrapes, self.scrapes + 1
        value = str(float(self.retracted))
        if self.metric_values:  # a malformed or reset counter, as the knob says
            value = self.metric_values[min(scrape, len(self.metric_values) - 1)]
        # Like SGLang: the sample exists only from the first retraction on (.labels().inc()).
        for rank in range(self.args.tp_size if self.retracted or self.metric_values else 0):
            labels = f'engine_type="{engine}",model_name="{self.model}",moe_ep_rank="0",pp_rank="0",tp_rank="{rank}"'
            lines.append(f"sglang:num_retracted_requests_total{{{labels}}} {value}")
            lines.append(f"sglang:num_retracted_requests_created{{{labels}}} 1.7e9")
        lines += [
            "# HELP sglang:num_retracted_reqs The number of retracted requests.",
            "# TYPE sglang:num_retracted_reqs gauge",
            f'sglang:num_retracted_reqs{{engine_type="{engine}",tp_rank="0"}} 0.0',
        ]
        return "\n".join(lines) + "\n"

    def server_info(self) -> dict[str, object]:
        a = self.args
        return {
            "model_path": a.model_path,
            "disaggregation_mode": a.disaggregation_mode,
            "disaggregation_bootstrap_port": a.disaggregation_bootstrap_port,
            "tp_size": a.tp_size,
            "base_gpu_id": a.base_gpu_id,
            "max_total_num_tokens": a.max_total_tokens or 65536,
            "disaggregation_decode_retraction_backup": a.disaggregation_decode_retraction_backup or "host_pool",
            "internal_states": [{}],
            "version": VERSION,
            "frontend": "python",
        }


def make_handler(state: State) -> type[JsonHandler]:
    class Handler(JsonHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path in ("/health", "/health_generate"):
                self.send(200 if state.healthy() else 503, {})
            elif path == "/metrics" and state.args.enable_metrics:
                self.send(200, text=state.metrics(), content_type="text/plain; version=0.0.4")
            elif path in ("/get_server_info", "/server_info"):
                hang = state.knobs.number("INFO_HANG_SECONDS", 0.0)
                if hang:
                    threading.Event().wait(hang)
                self.send(200, state.server_info())
            elif path in ("/get_model_info", "/model_info"):
                self.send(200, {"model_path": state.args.model_path, "is_generation": True})
            elif path == "/v1/models":
                self.send(200, {"object": "list", "data": [{"id": state.model, "object": "model"}]})
            elif path == "/flush_cache":
                self.send(200, text="Cache flushed.\n", content_type="text/plain")
            else:
                self.send(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            body = self.body()
            if path == "/flush_cache":
                self.send(200, text="Cache flushed.\n", content_type="text/plain")
                return
            if path not in ("/generate", "/v1/completions"):
                self.send(404, {"detail": "Not Found"})
                return
            state.admit()
            prompt = str(body.get("text") if path == "/generate" else body.get("prompt"))
            text = state.book.reply(prompt)
            tokens = max(1, len(text) // 4)
            prompt_tokens = max(1, len(prompt) // 4)
            rid = uuid.uuid4().hex
            if path == "/generate":
                meta = {
                    "id": rid,
                    "finish_reason": {"type": "stop", "matched": "Question"},
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": tokens,
                    "cached_tokens": 0,
                    "e2e_latency": 0.0,
                }
                self.send(200, {"text": text, "output_ids": [], "meta_info": meta})
            else:
                choice = {
                    "index": 0,
                    "text": text,
                    "logprobs": None,
                    "finish_reason": "stop",
                    "matched_stop": "Question",
                }
                usage = {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": tokens,
                    "total_tokens": prompt_tokens + tokens,
                }
                self.send(
                    200,
                    {
                        "id": rid,
                        "object": "text_completion",
                        "created": int(time.time()),
                        "model": body.get("model"),
                        "choices": [choice],
                        "usage": usage,
                    },
                )

    return Handler


def main(argv: list[str]) -> None:
    args = parse(argv)
    role = "decode" if args.disaggregation_mode == "decode" else "prefill"
    knobs = Knobs(role)
    log(f"stand-in {role} server for {args.model_path}: {' '.join(argv)}")
    if knobs.raw("EXIT_AT_START"):
        exit_now(int(knobs.raw("EXIT_AT_START")), "stand-in exiting at start as asked")
    if knobs.flag("IGNORE_SIGTERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if knobs.raw("ESCAPE"):
        spawn_escapee(knobs.raw("ESCAPE"), knobs.raw("ESCAPE_PIDFILE"))
    state = State(args, knobs)
    if knobs.flag("NEVER_LISTEN"):
        log("still loading the model (NEVER_LISTEN): the port stays unbound")
        threading.Event().wait()
    server = FastServer((args.host, args.port), make_handler(state))
    log(f"The server is fired up and ready to roll! ({args.host}:{args.port})")
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
