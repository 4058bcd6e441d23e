"""A test double of one SGLang server for a bundle's ``run.py`` (tests/consistency/test_bundle_runner.py): the three
endpoints ``run.py`` reads, in SGLang's wire format, and nothing else. Standard library only (it runs where kvdoctor
is not importable, as a bundle's servers do).

- ``GET /health``: 200 (SGLang's health check, ``srt/entrypoints/http_server.py``);
- ``POST /generate`` with ``input_ids`` and ``sampling_params.max_new_tokens``: SGLang's reply, ``output_ids`` and
  ``meta_info.output_token_logprobs`` as ``[logprob, token_id, text]`` triples (``return_logprob``), the tokens
  :func:`tokens` of the prompt;
- ``GET /metrics``: the Prometheus text page with the retraction counter's HELP/TYPE and, per scrape, the next value
  of ``DOUBLE_COUNTER`` (comma-separated, spelled as the page spells it: ``5.0``, ``NaN``, ``+Inf``; ``-`` for no
  sample, as a fresh server's page has none; the last value repeats).

``DOUBLE_STATE``: a file it writes once listening (``{"pid", "port"}``). ``DOUBLE_HOLD``: a file it writes when it
holds a measured request (every ``/generate`` after the first, the warm-up) open for good, without answering.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

COUNTER = "sglang:num_retracted_requests_total"
LOGPROB = -0.5


def tokens(body: dict[str, Any]) -> list[int]:
    """The double's greedy tokens for a request BODY (the test's expected tokens, computed the same way)."""
    ids = body["input_ids"]
    return [(sum(ids) + 7 * k) % 1000 for k in range(int(body["sampling_params"]["max_new_tokens"]))]


class _State:
    lock = threading.Lock()
    generated = 0
    scrapes = 0
    forever = threading.Event()  # never set: a held request waits on it


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"double: {format % args}\n")

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, b"", "text/plain")
        elif self.path == "/metrics":
            self._send(200, _metrics().encode(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._send(404, b'{"detail":"Not Found"}', "application/json")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        if self.path != "/generate":
            self._send(404, b'{"detail":"Not Found"}', "application/json")
            return
        with _State.lock:
            _State.generated += 1
            measured = _State.generated > 1
        hold = os.environ.get("DOUBLE_HOLD")
        if hold and measured:
            with open(hold, "w", encoding="utf-8") as fh:
                json.dump({"pid": os.getpid(), "port": self.server.server_address[1]}, fh)
            _State.forever.wait()
        out = tokens(body)
        meta = {
            "id": f"{_State.generated:032x}",
            "finish_reason": {"type": "length", "length": len(out)},
            "prompt_tokens": len(body["input_ids"]),
            "completion_tokens": len(out),
            "cached_tokens": 0,
            "output_token_logprobs": [[LOGPROB, t, None] for t in out],
        }
        reply = {"text": "", "output_ids": out, "meta_info": meta}
        self._send(200, json.dumps(reply).encode(), "application/json")


def _metrics() -> str:
    values = os.environ.get("DOUBLE_COUNTER", "-").split(",")
    with _State.lock:
        value = values[min(_State.scrapes, len(values) - 1)]
        _State.scrapes += 1
    lines = [
        f"# HELP {COUNTER} The number of retracted requests.",
        f"# TYPE {COUNTER} counter",
    ]
    if value != "-":
        lines.append(f'{COUNTER}{{model_name="double",engine_type="unified"}} {value}')
    lines += ["# HELP sglang:num_running_reqs The number of running requests.", "# TYPE sglang:num_running_reqs gauge"]
    lines.append('sglang:num_running_reqs{model_name="double",engine_type="unified"} 0.0')
    return "\n".join(lines) + "\n"


def main() -> None:
    port = int(sys.argv[sys.argv.index("--port") + 1])
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    state = os.environ.get("DOUBLE_STATE")
    if state:
        with open(state, "w", encoding="utf-8") as fh:
            json.dump({"pid": os.getpid(), "port": port}, fh)
    server.serve_forever()


if __name__ == "__main__":
    main()
