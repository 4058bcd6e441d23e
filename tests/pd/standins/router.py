"""Stand-in for ``python -m sglang_router.launch_router --pd-disaggregation [--mini-lb]``.

Like both real routers it answers ``/health`` with 200 whatever the backends do; like mini_lb it
fans ``/health_generate`` out to every worker, and like the Rust router (without ``--mini-lb``)
it serves ``/readiness`` (200 only when every worker's ``/health`` is). It returns the decode
worker's reply to ``/generate`` and ``/v1/completions`` (it does not send to prefill: the
stand-ins transfer no KV). Knobs (ROUTER role): CRASH_AFTER, EXIT_AT_START, NEVER_HEALTHY,
MALFORMED=html|list|null-choices (answer every request after MALFORMED_AFTER with that 200 body).
"""

from __future__ import annotations

import argparse
import http.client
import sys
import threading
import urllib.parse

from common import FastServer, JsonHandler, Knobs, exit_now, log

# 200 replies a broken proxy in front of the router could give (knob MALFORMED).
MALFORMED = {"html": "<html>502 Bad Gateway</html>", "list": "[]", "null-choices": '{"choices": null}'}


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="sglang_router.launch_router (stand-in)")
    p.add_argument("--pd-disaggregation", action="store_true")
    p.add_argument("--mini-lb", action="store_true")
    p.add_argument("--prefill", nargs="+", action="append", default=[])  # URL [BOOTSTRAP_PORT]
    p.add_argument("--decode", nargs=1, action="append", default=[])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--prometheus-port", type=int, default=29000)
    p.add_argument("--prometheus-host", default="127.0.0.1")
    p.add_argument("--policy", default="cache_aware")
    args = p.parse_args(argv)
    if not args.pd_disaggregation or not args.prefill or not args.decode:
        p.error("--pd-disaggregation with at least one --prefill and one --decode is required")
    return args


class Upstream:
    """One keep-alive connection per handler thread to a worker."""

    def __init__(self, url: str) -> None:
        parsed = urllib.parse.urlsplit(url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.local = threading.local()

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes, str]:
        for attempt in range(2):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = http.client.HTTPConnection(self.host, self.port, timeout=600)
            try:
                headers = {"Content-Type": "application/json"} if body is not None else {}
                conn.request(method, path, body=body, headers=headers)
                response = conn.getresponse()
                return response.status, response.read(), response.getheader("Content-Type", "")
            except (OSError, http.client.HTTPException):
                conn.close()
                self.local.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")


def main(argv: list[str]) -> None:
    args = parse(argv)
    knobs = Knobs("router")
    log(f"stand-in router: {' '.join(argv)}")
    if knobs.raw("EXIT_AT_START"):
        exit_now(int(knobs.raw("EXIT_AT_START")), "stand-in router exiting at start as asked")
    prefill = [Upstream(p[0]) for p in args.prefill]
    decode = [Upstream(d[0]) for d in args.decode]
    crash_after = int(knobs.number("CRASH_AFTER", 0))
    malformed = knobs.raw("MALFORMED")
    malformed_after = int(knobs.number("MALFORMED_AFTER", 0))
    counter = {"n": 0}
    lock = threading.Lock()

    class Handler(JsonHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path in ("/health", "/liveness"):
                self.send(200, {})  # says nothing about the workers (mini_lb: always 200)
            elif path == "/health_generate" or (path == "/readiness" and not args.mini_lb):
                # mini_lb fans /health_generate out; the Rust router's /readiness checks workers.
                probe = "/health_generate" if path == "/health_generate" else "/health"
                codes = [self.probe(w, probe) for w in (*prefill, *decode)]
                ready = all(c == 200 for c in codes) and not knobs.flag("NEVER_HEALTHY")
                self.send(200 if ready else 503, {})
            elif path == "/get_server_info":
                self.send(200, {"prefill": [], "decode": [], "internal_states": []})
            elif path == "/flush_cache":
                self.send(200, text="Cache flushed.\n", content_type="text/plain")
            else:
                self.send(404, {"detail": "Not Found"})

        def probe(self, worker: Upstream, path: str) -> int:
            try:
                return worker.request("GET", path)[0]
            except (OSError, http.client.HTTPException):
                return 503

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if path not in ("/generate", "/v1/completions", "/flush_cache"):
                self.send(404, {"detail": "Not Found"})
                return
            with lock:
                counter["n"] += 1
                n = counter["n"]
            if crash_after and n > crash_after:
                exit_now(3, f"stand-in router crashing after {crash_after} requests")
            if malformed and n > malformed_after:
                self.send(200, text=MALFORMED[malformed])
                return
            try:
                status, body, kind = decode[0].request("POST", path, raw)
            except (OSError, http.client.HTTPException) as exc:
                self.send(502, {"error": f"decode unreachable: {exc}"})
                return
            self.send(status, text=body.decode(), content_type=kind or "application/json")

    server = FastServer((args.host, args.port), Handler)
    log(f"router ready on {args.host}:{args.port}")
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
