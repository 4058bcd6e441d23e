"""Shared pieces of the SGLang stand-ins: behaviour knobs, the GSM8K answer book, a fast HTTP base.

Knobs are environment variables ``KVDOCTOR_STANDIN_<KNOB>``; ``KVDOCTOR_STANDIN_<ROLE>_<KNOB>``
(ROLE = PREFILL, DECODE or ROUTER) overrides it for one role, since prefill and decode run the
same launcher and inherit the same environment.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PREFIX = "KVDOCTOR_STANDIN_"
DEFAULT_DATA = Path(__file__).resolve().parents[3] / "fixtures" / "gsm8k" / "test.jsonl"
STOP = ("Question", "Assistant:", "<|separator|>")


class Knobs:
    def __init__(self, role: str) -> None:
        self.role = role.upper()

    def raw(self, name: str, default: str = "") -> str:
        return os.environ.get(f"{PREFIX}{self.role}_{name}", os.environ.get(PREFIX + name, default))

    def number(self, name: str, default: float) -> float:
        value = self.raw(name)
        return float(value) if value else default

    def flag(self, name: str) -> bool:
        return self.raw(name) not in ("", "0", "false")


_LOG_LOCK = threading.Lock()


def log_line(line: str) -> None:
    """One whole line per write, as SGLang's logging handler does.

    ``print`` writes the text and its newline separately, so two request threads could splice their
    lines together (one retraction line lost to the log counter's line anchor).
    """
    with _LOG_LOCK:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    log_line(f"[{stamp}] {message}")


class AnswerBook:
    """Answers a GSM8K prompt from the data file: right for a chosen fraction of lines."""

    def __init__(self, path: Path, accuracy: float, mode: str) -> None:
        self.by_question: dict[str, tuple[int, str]] = {}
        with path.open(encoding="utf-8") as fh:
            for line, raw in enumerate(fh):
                obj = json.loads(raw)
                self.by_question[obj["question"]] = (line, obj["answer"])
        self.accuracy = accuracy
        self.mode = mode

    def reply(self, prompt: str) -> str:
        start = prompt.rfind("Question: ")
        question = prompt[start + len("Question: ") :].rsplit("\nAnswer:", 1)[0]
        found = self.by_question.get(question)
        if found is None:
            return " 2"
        line, answer = found
        if self.mode == "none":
            return " I am not sure."
        body, gold = answer.rsplit("#### ", 1)
        # Exactly floor((line+1)·a) - floor(line·a) ∈ {0, 1}: a fraction `a` of lines, spread evenly.
        right = math.floor((line + 1) * self.accuracy) > math.floor(line * self.accuracy)
        if not right:
            gold = str(int(gold.replace(",", "")) + 1)
        return trim_at_stop(f" {body}#### {gold}")


def trim_at_stop(text: str) -> str:
    cut = min((i for i in (text.find(s) for s in STOP) if i >= 0), default=len(text))
    return text[:cut]


class FastServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # 128 clients connect at once; the default backlog of 5 drops SYNs


class JsonHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as uvicorn serves SGLang

    def log_message(self, format: str, *args: object) -> None:
        pass  # one access line per request would dominate the log

    def body(self) -> dict[str, object]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw) if raw else {}

    def send(
        self, status: int, payload: object = None, *, text: str | None = None, content_type: str = "application/json"
    ) -> None:
        data = (text if text is not None else json.dumps(payload)).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def spawn_escapee(kind: str, pidfile: str) -> None:
    """A grandchild that leaves our process group: ``setsid`` (still our child until we die),
    ``daemon`` (double fork: reparented away at once, invisible to a tree walk) or ``daemon-noenv``
    (a daemon with a cleared environment: no run marker either; only a subreaper still sees it)."""
    code = (
        "import os, sys, time\n"
        "if sys.argv[1].startswith('daemon') and os.fork():\n"
        "    os._exit(0)\n"
        "os.setsid()\n"
        "open(sys.argv[2] + '.tmp', 'w').write(str(os.getpid()))\n"
        "os.rename(sys.argv[2] + '.tmp', sys.argv[2])\n"
        "time.sleep(3600)\n"
    )
    env = {} if kind == "daemon-noenv" else None
    child = subprocess.Popen([sys.executable, "-c", code, kind, pidfile], env=env)
    if kind.startswith("daemon"):
        child.wait()
    deadline = time.monotonic() + 30
    while not os.path.exists(pidfile) and time.monotonic() < deadline:
        time.sleep(0.01)  # the server must not report healthy before its escapee is recorded


def exit_now(code: int, message: str) -> None:
    log(message)
    sys.stdout.flush()
    os._exit(code)
