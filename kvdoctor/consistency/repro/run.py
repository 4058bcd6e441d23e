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
and stops every server it started (also on an error, Ctrl-C or SIGTERM, requests in flight or not). Server logs go
to ``logs/``; the result to ``result.json``.

Exit codes: 0 every request identical to the reference (tokens, and logprobs within the tolerance) with retractions
counted; 1 a request diverged or drifted (the finding reproduced); 2 identical but nothing was retracted (the
path did not run: no verdict); 3 the deployment cannot be judged: a server did not start, a request failed, a CPU
stand-in was called, or the retraction counter is no count (not a number, NaN, infinite, negative) or went
backwards (the server restarted or it was reset); 130 Ctrl-C, 143 SIGTERM (every server it started stopped).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PLACEHOLDER = re.compile(r"\{(port\d+|checkpoint|bundle|python)\}")


class LaunchFailed(Exception):
    pass


class Uncountable(LaunchFailed):
    """The retraction counter cannot be read as a count: the deployment cannot be judged (exit 3)."""


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
        with STOP.held():  # a signal here waits until the server is recorded (and so stopped)
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


def _sample(counter: str) -> re.Pattern[str]:
    """A sample of COUNTER in the Prometheus text format: the name, its labels (quoted values may hold anything),
    its value, an optional timestamp."""
    labels = r'(?:\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?'
    return re.compile(rf"^{re.escape(counter)}{labels}[ \t]+(\S+)(?:[ \t]+\S+)?[ \t]*$")


def retractions(url: str, counter: str) -> float | None:
    """The sum of COUNTER's samples on the ``/metrics`` page at URL; None when the page does not answer or carries
    none (SGLang creates the sample at the first retraction). A sample, or a sum, that is no count raises
    ``Uncountable``, naming it: the server's metrics are malformed."""
    status, text = http("GET", url)
    return parse_retractions(text.decode(errors="replace"), counter) if status == 200 else None


def parse_retractions(text: str, counter: str) -> float | None:
    """The sum of COUNTER's samples in a ``/metrics`` page's TEXT (None: no sample)."""
    sample = _sample(counter)
    total = None
    for line in text.splitlines():
        match = sample.match(line.strip())
        if match is None:
            continue
        try:
            value = float(match.group(1))
        except ValueError:
            value = None
        total = (total or 0.0) + counted(value, line.strip()[: match.start(1)].strip(), match.group(1))
    if total is None:
        return None
    return counted(total, f"the sum of {counter}'s samples", "+Inf" if math.isinf(total) else repr(total))


def counted(value: float | None, name: str, spelled: str) -> float:
    """VALUE (a sample NAME carries, SPELLED as the page spells it) when it is a count, else ``Uncountable``."""
    if value is None or not math.isfinite(value) or value < 0:
        raise Uncountable(
            f"{name} is {spelled}, not a count (a counter is a finite number >= 0); the server's metrics are "
            "malformed, so its retractions cannot be counted: no verdict"
        )
    return value


def retracted(counter: str, before: float | None, after: float | None) -> float | None:
    """The retractions the run counted, from the counter BEFORE and AFTER it (None: unknown)."""
    if after is None:
        return None
    if before is not None and after < before:
        raise Uncountable(
            f"{counter} went backwards during the run ({before:g} before it, {after:g} after): the server restarted "
            "or the counter was reset, so this run's retractions cannot be counted: no verdict"
        )
    return after - (before or 0.0)


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


class Stop:
    """SIGTERM and Ctrl-C (SIGINT) end the run with exit 128 + the signal (143, 130) once every server it started is
    stopped, wherever the main thread waits (a health check, the requests in flight): the handler stops the servers
    itself and raises ``SystemExit``. A signal while a server is being recorded (``held``) waits until it is; one
    after ``main`` began stopping the servers (``closing``) is noted and ends the run once they are stopped."""

    def __init__(self) -> None:
        self.servers: Servers | None = None
        self.signum: int | None = None
        self.holding = False
        self.closing = False

    def install(self, servers: Servers) -> None:
        self.servers = servers
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self.handle)

    def handle(self, signum: int, _frame: Any) -> None:
        if self.signum is not None:
            return  # already stopping
        self.signum = signum
        if not (self.holding or self.closing):
            self.stop()

    def stop(self) -> None:
        assert self.signum is not None
        print(f"run.py: {signal.Signals(self.signum).name}: stopping every server it started", file=sys.stderr)
        self.closing = True
        if self.servers is not None:
            self.servers.stop()
        raise SystemExit(128 + self.signum)

    @contextlib.contextmanager
    def held(self) -> Any:
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
        if self.signum is not None and not self.closing:
            self.stop()


STOP = Stop()


def send_all(url: str, bodies: list[dict[str, Any]], concurrency: int, timeout: float) -> list[dict[str, Any]]:
    """Every body POSTed to URL, CONCURRENCY in flight, the replies in order; the first failure raised. The workers
    are daemon threads and the main thread waits on an event, so a signal ends the run at once (the servers stopped
    close every request in flight) instead of waiting for the requests, as a pool's shutdown would."""
    got: list[dict[str, Any] | None] = [None] * len(bodies)
    failed: list[BaseException] = []
    todo = iter(range(len(bodies)))
    lock = threading.Lock()
    done = threading.Event()
    left = [len(bodies)]

    def work() -> None:
        while not done.is_set():
            with lock:
                i = next(todo, None)
            if i is None:
                return
            try:
                got[i] = generate(url, bodies[i], timeout)
            except BaseException as exc:  # handed to the main thread
                failed.append(exc)
                done.set()
                return
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    done.set()

    if not bodies:
        return []
    for _ in range(max(1, min(concurrency, len(bodies)))):
        threading.Thread(target=work, daemon=True).start()
    while not done.wait(1.0):
        pass
    if failed:
        raise failed[0]
    return [g for g in got if g is not None]


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
    STOP.install(servers)  # SIGTERM and Ctrl-C stop the servers too, requests in flight or not
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
        send_all(url, [spec["warm_up"]], 1, args.request_timeout)
        counter = spec["retraction_counter"]
        before = retractions(metrics, counter)
        print(f"[send] {len(spec['bodies'])} requests, {spec['concurrency']} in flight", file=sys.stderr)
        got = send_all(url, spec["bodies"], spec["concurrency"], args.request_timeout)
        servers.check_alive()
        count = retracted(counter, before, retractions(metrics, counter))
    except (LaunchFailed, OSError, ValueError) as exc:
        failed = f"run.py: {exc}"
    else:
        failed = None
    finally:
        STOP.closing = True  # a signal from here on is noted: the servers are being stopped
        servers.stop()
    if STOP.signum is not None:
        print(f"run.py: {signal.Signals(STOP.signum).name}: every server it started is stopped", file=sys.stderr)
        return 128 + STOP.signum
    if failed is not None:
        print(failed, file=sys.stderr)
        return 3
    stand_in = fill(spec["stand_in_log"], values) if spec.get("stand_in_log") else None
    if stand_in and Path(stand_in).exists() and Path(stand_in).read_text().strip():
        print(f"run.py: a CPU stand-in function was called ({stand_in}): no verdict", file=sys.stderr)
        return 3
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
    code = 1 if red else (0 if count else 2)
    verdict = {0: "identical to the reference", 1: "REPRODUCED", 2: "identical, but nothing was retracted"}[code]
    print(
        f"{verdict}: {len(rows) - len(red)}/{len(rows)} requests identical; retractions counted: "
        f"{'unknown' if count is None else int(count)}; extra server flags: {' '.join(extra) or 'none'}"
    )
    result = {"exit_code": code, "retractions": count, "extra_flags": extra, "requests": rows, "observed": got}
    (bundle / "result.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
