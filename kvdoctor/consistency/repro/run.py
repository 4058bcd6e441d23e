#!/usr/bin/env python3
"""Reproduce a kvdoctor finding without kvdoctor: launch the servers, send the workload, compare.

Stand-alone: the standard library and the server's HTTP API only (kvdoctor copies this file into every bundle it
writes; it imports nothing of kvdoctor). Run it with the Python of an environment where the server is installed
(for SGLang over PD: ``sglang``, ``sglang-router`` and ``mooncake-transfer-engine``)::

    python3 run.py                                   # the run that was red
    python3 run.py -- --disable-overlap-schedule     # the same with flags added to every server

It reads ``bundle.json`` beside it: the servers' command lines and environments as the red run launched them (the
checkpoint and ports left as placeholders), the CPU enablers it needs (``enablers/``), the prompts as token ids, the
request bodies, and the tokens and logprobs the roomy reference produced. It picks free ports, launches every server
in its own process group, waits until each answers its health check, sends one warm-up request and then every
prompt with the red run's concurrency, reads the server's retraction counter, compares every token and logprob,
and stops every server it started (also on an error or Ctrl-C). Server logs go to ``logs/``; the result to
``result.json``.

Exit codes: 0 every request identical to the reference (tokens, and logprobs within the tolerance) with retractions
counted; 1 a request diverged or drifted (the finding reproduced); 2 identical but nothing was retracted (the
path did not run: no verdict); 3 a server did not start or a request failed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PLACEHOLDER = re.compile(r"\{(port\d+|checkpoint|bundle|python)\}")


class LaunchFailed(Exception):
    pass


def free_ports(n: int) -> list[int]:
    """N free ports below the kernel's ephemeral range (17000-21999): a server binds its port only after its model
    has loaded, and meanwhile another server's gloo groups take ports from the ephemeral range (port 0)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            low = int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    pool = list(range(17000, min(22000, low)))
    random.shuffle(pool)
    socks: list[socket.socket] = []
    try:
        while len(socks) < n:
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", pool.pop() if pool else 0))
            except OSError:
                s.close()
                if not pool:
                    raise
                continue  # held by another process: the next one
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def fill(text: str, values: dict[str, str]) -> str:
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], text)


def http(method: str, url: str, body: Any = None, timeout: float = 30.0) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class Servers:
    """The processes this script started; each in its own session, stopped as a group."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, role: str, argv: list[str], env: dict[str, str]) -> None:
        log = (self.logs / f"{role}.log").open("wb")
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append((role, proc))
        print(f"[launch] {role}: pid {proc.pid}: {' '.join(argv)}", file=sys.stderr)

    def wait_healthy(self, role: str, url: str, timeout: float) -> None:
        proc = dict(self.procs)[role]
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if proc.poll() is not None:
                raise LaunchFailed(f"{role} exited with {proc.returncode} before answering {url} (logs/{role}.log)")
            try:
                status, _ = http("GET", url, timeout=5.0)
                if status == 200:
                    print(f"[launch] {role}: healthy", file=sys.stderr)
                    return
            except OSError:
                pass
            time.sleep(1.0)
        raise LaunchFailed(f"{role} did not answer {url} within {timeout:.0f} s (logs/{role}.log)")

    def check_alive(self) -> None:
        for role, proc in self.procs:
            if proc.poll() is not None:
                raise LaunchFailed(f"{role} exited with {proc.returncode} during the run (logs/{role}.log)")

    def stop(self, grace: float = 15.0) -> None:
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        end = time.monotonic() + grace
        for _, proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, end - time.monotonic()))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # anything the server spawned in its group
            if proc.poll() is None:
                proc.wait()


def retractions(url: str, counter: str) -> float | None:
    status, text = http("GET", url)
    if status != 200:
        return None
    total = None
    for line in text.decode(errors="replace").splitlines():
        if line.startswith(counter) and not line.startswith("#"):
            try:
                total = (total or 0.0) + float(line.rsplit(" ", 1)[1])
            except ValueError:
                continue
    return total


def generate(url: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    status, raw = http("POST", url, body, timeout=timeout)
    if status != 200:
        raise LaunchFailed(f"POST {url} answered {status}: {raw[:200]!r}")
    reply = json.loads(raw)
    if isinstance(reply, list) and len(reply) == 1:
        reply = reply[0]
    entries = (reply.get("meta_info") or {}).get("output_token_logprobs")
    if not isinstance(entries, list):
        raise LaunchFailed(f"POST {url}: no meta_info.output_token_logprobs in the reply: {raw[:200]!r}")
    return {"tokens": [int(e[1]) for e in entries], "logprobs": [float(e[0]) for e in entries]}


def compare(expected: list[dict[str, Any]], got: list[dict[str, Any]], tolerance: float) -> list[dict[str, Any]]:
    rows = []
    for i, (ref, out) in enumerate(zip(expected, got, strict=True)):
        a, b = ref["tokens"], out["tokens"]
        same = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        diverged = same < max(len(a), len(b))
        deltas = [abs(x - y) for x, y in zip(ref["logprobs"][:same], out["logprobs"][:same], strict=False)]
        drift = max(deltas, default=0.0)
        first_drift = next((k for k, d in enumerate(deltas) if d > tolerance), None)
        rows.append(
            {
                "request": i,
                "diverged_at": same if diverged else None,
                "expected": a[same] if diverged and same < len(a) else None,
                "observed": b[same] if diverged and same < len(b) else None,
                "max_abs_dlogprob": drift,
                "drifts_at": first_drift,
            }
        )
    return rows


def _terminated(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, default=HERE, help="the bundle directory (default: this file's)")
    parser.add_argument("--launch-timeout", type=float, default=600.0)
    parser.add_argument("--request-timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    bundle = args.bundle.resolve()
    spec = json.loads((bundle / "bundle.json").read_text(encoding="utf-8"))
    logs = bundle / "logs"
    logs.mkdir(exist_ok=True)
    values = {"checkpoint": str(bundle / "checkpoint"), "bundle": str(bundle), "python": sys.executable}
    values |= {f"port{i}": str(p) for i, p in enumerate(free_ports(spec["ports"]))}
    servers = Servers(logs)
    signal.signal(signal.SIGTERM, _terminated)  # a SIGTERM stops the servers too (finally), as Ctrl-C does
    try:
        for step in spec["steps"]:
            cmd = [fill(a, values) for a in step["argv"]]
            if step.get("takes_extra_flags"):
                cmd += extra
            env = {k: v for k, v in os.environ.items() if not k.startswith("KVDOCTOR_")}  # the finder's own
            env |= {k: fill(v, values) for k, v in step["env"].items()}
            if "PYTHONPATH" in step["env"] and os.environ.get("PYTHONPATH"):  # the enablers first, then yours
                env["PYTHONPATH"] += ":" + os.environ["PYTHONPATH"]
            servers.start(step["role"], cmd, env)
        for step in spec["steps"]:  # all started at once, as the red run started them
            servers.wait_healthy(step["role"], fill(step["health_url"], values), args.launch_timeout)
        url = fill(spec["generate_url"], values)
        metrics = fill(spec["metrics_url"], values)
        generate(url, spec["warm_up"], args.request_timeout)
        before = retractions(metrics, spec["retraction_counter"]) or 0.0
        print(f"[send] {len(spec['bodies'])} requests, {spec['concurrency']} in flight", file=sys.stderr)
        with concurrent.futures.ThreadPoolExecutor(max_workers=spec["concurrency"]) as pool:
            futures = [pool.submit(generate, url, body, args.request_timeout) for body in spec["bodies"]]
            got = [f.result() for f in futures]
        servers.check_alive()
        after = retractions(metrics, spec["retraction_counter"])
    except (LaunchFailed, OSError, ValueError) as exc:
        print(f"run.py: {exc}", file=sys.stderr)
        return 3
    finally:
        servers.stop()
    stand_in = fill(spec["stand_in_log"], values) if spec.get("stand_in_log") else None
    if stand_in and Path(stand_in).exists() and Path(stand_in).read_text().strip():
        print(f"run.py: a CPU stand-in function was called ({stand_in}): no verdict", file=sys.stderr)
        return 3
    retracted = None if after is None else after - before
    rows = compare(spec["expected"], got, spec["logprob_tolerance"])
    red = [r for r in rows if r["diverged_at"] is not None or r["drifts_at"] is not None]
    for r in red:
        if r["diverged_at"] is not None:
            print(f"request {r['request']}: token {r['diverged_at']}: expected {r['expected']}, got {r['observed']}")
        else:
            print(
                f"request {r['request']}: identical tokens, logprob drifts by {r['max_abs_dlogprob']:.2g} from token "
                f"{r['drifts_at']} (tolerance {spec['logprob_tolerance']:g})"
            )
    code = 1 if red else (0 if retracted else 2)
    verdict = {0: "identical to the reference", 1: "REPRODUCED", 2: "identical, but nothing was retracted"}[code]
    print(
        f"{verdict}: {len(rows) - len(red)}/{len(rows)} requests identical; retractions counted: "
        f"{'unknown' if retracted is None else int(retracted)}; extra server flags: {' '.join(extra) or 'none'}"
    )
    result = {"exit_code": code, "retractions": retracted, "extra_flags": extra, "requests": rows, "observed": got}
    (bundle / "result.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
