"""``kvdoctor bench pd-eval`` runs end to end (tiny sizes; the numbers themselves are not tested)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from kvdoctor.cli.app import app
from tests.pd.helpers import GSM8K, KVDOCTOR, ROOT, default_sigint, pid_alive


def test_bench_reports_both_clients() -> None:
    args = [
        "bench",
        "pd-eval",
        "--data-path",
        str(GSM8K),
        "--num-questions",
        "16",
        "--parallel",
        "4",
        "--repeats",
        "1",
        "--json",
    ]
    run = CliRunner().invoke(app, args, catch_exceptions=False)
    assert run.exit_code == 0, run.output
    data = json.loads(run.stdout)
    assert [loop["name"] for loop in data["loops"]] == ["sharded", "single pool"]
    assert all(loop["requests"] == 16 for loop in data["loops"])


def test_bench_table_reads_whole_at_80_columns() -> None:
    args = ["bench", "pd-eval", "--data-path", str(GSM8K), "--num-questions", "8", "--parallel", "2", "--repeats", "1"]
    run = CliRunner().invoke(app, args, env={"COLUMNS": "80", "NO_COLOR": "1"}, catch_exceptions=False)
    assert run.exit_code == 0, run.output
    assert "…" not in run.stdout and "\x1b[" not in run.stdout, run.stdout
    assert all(len(line) <= 80 for line in run.stdout.splitlines()), run.stdout
    assert [line for line in run.stdout.splitlines() if line.startswith("verdict:")] == [run.stdout.splitlines()[-1]]
    assert run.stdout.splitlines()[-1].startswith("verdict: passed — sharded pools vs one: ")


def wait_for(predicate: Callable[[], bool], timeout_s: float = 60.0) -> None:
    """Poll an observable state with a generous deadline (never a fixed delay)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def listening_server(bench: psutil.Process) -> psutil.Process | None:
    """The bench's instant server once it accepts connections (a spawned multiprocessing child)."""
    for child in bench.children(recursive=True):
        try:
            if "spawn_main" in " ".join(child.cmdline()) and any(
                c.status == psutil.CONN_LISTEN for c in child.net_connections("tcp")
            ):
                return child
        except psutil.Error:
            continue
    return None


@pytest.mark.usefixtures("no_leftovers")
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_stops_the_instant_server(sig: signal.Signals, code: int, tmp_path: Path) -> None:
    args = [
        "bench",
        "pd-eval",
        "--data-path",
        str(GSM8K),
        "--num-questions",
        "16",
        "--parallel",
        "4",
        "--repeats",
        "100000",
    ]  # runs until signalled
    stderr = tmp_path / "stderr.txt"
    with stderr.open("wb") as sink:  # a file, not a pipe: a leaked server would hold a pipe open
        proc = subprocess.Popen(
            [*KVDOCTOR, *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=sink, preexec_fn=default_sigint
        )
    try:
        bench = psutil.Process(proc.pid)
        wait_for(lambda: listening_server(bench) is not None)
        server = listening_server(bench)
        assert server is not None
        children = bench.children(recursive=True)  # the server and multiprocessing's helpers
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == code, stderr.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not pid_alive(server.pid), "the instant server outlived the bench"
    wait_for(lambda: not any(pid_alive(c.pid) for c in children))  # helpers exit on EOF
