"""Ctrl-C and SIGTERM on a run that is provably under way: one line, 130 or 143, and this run's JUnit
error case in place of the earlier run's pass (kvdoctor/cli/errors.py, kvdoctor/report/verdicts.py).

Each test starts the real CLI with ``tests/cli/block_hook`` on PYTHONPATH: its sitecustomize wraps one
function (``KVDOCTOR_TEST_BLOCK_AT``) so that the run says on stderr that it got there and then waits
for a signal. The test sends the signal once it has read that line (bounded by a deadline), so the
point the run is stopped at is known, not guessed with a sleep.

Each child starts with SIGINT at its default action (``default_sigint``), whatever this process was started
with: a runner that starts jobs with SIGINT ignored (``nohup make test &``, a non-interactive shell's ``&``)
passes the ignored SIGINT on, Python then keeps it ignored (it installs its Ctrl-C handler only over the
default action), and the test's SIGINT would do nothing (issue 28, defect 15).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from junitparser import Error, JUnitXml

from kvdoctor.report import junit
from tests.pd.helpers import default_sigint

HOOK = Path(__file__).parent / "block_hook"
MARK = b"kvdoctor-test: blocked at"
TINY_ROUNDTRIP = ["roundtrip", "inkling-small", "--device", "cpu", "--requests", "2", "--tokens", "8"]
SUITES = {"roundtrip": "kvdoctor.roundtrip", "inspect": "kvdoctor.inspect", "drift": "kvdoctor.drift"}
WORK = {  # inside the command's work (kvdoctor.report.verdicts.errors_published)
    "roundtrip": (TINY_ROUNDTRIP, "kvdoctor.state.run:run_roundtrip"),
    "inspect": (["inspect", "inkling-small"], "kvdoctor.core.sglang.analysis:analyze"),
    # the first step of drift's work: finding the installed SGLang (a missing one is said before torch is imported)
    "drift": (["drift", "--fixture", "inkling-small"], "kvdoctor.engines.sglang._runtime:engine_info"),
}
# After the work, while the tables print and before the verdict is published (verdicts.unfinished)
RENDER = {
    "roundtrip": (TINY_ROUNDTRIP, "kvdoctor.cli.verdict:print_verdict"),
    "inspect": (["inspect", "inkling-small"], "kvdoctor.cli.verdict:print_verdict"),
}
LINES = {signal.SIGINT: (130, "kvdoctor: interrupted"), signal.SIGTERM: (143, "kvdoctor: terminated")}
# The real-server commands, stopped inside their servers' supervision (kvdoctor.deploy.signals' latch: the run
# catches the signal, tears down, and returns a result that says 130/143). The seeded checkpoint is stubbed as
# cached, so no transformers is needed, and the server environment as present (kvdoctor.core.environments: its
# preflight would refuse the main environment first); nothing is launched before the block.
STUB_CHECKPOINT = (
    "import pathlib\n"
    "from kvdoctor.core import environments\n"
    "environments.missing = lambda modules: ()\n"
    "from kvdoctor.consistency import checkpoint\n"
    "def ensure(config, seed, root):\n"
    "    path = pathlib.Path(root) / 'checkpoints' / 'stub'\n"
    "    path.mkdir(parents=True, exist_ok=True)\n"
    "    return checkpoint.Checkpoint(path, 'stub', seed, '0' * 64, cached=True)\n"
    "checkpoint.ensure = ensure\n"
    "from kvdoctor.cli.app import main\n"
    "main()\n"
)
SUPERVISED = "kvdoctor.consistency.run:_deploy_and_compare"
REAL_SERVER = {
    "consistency": ["consistency", "llama-3.1-8b", "--shrink"],
    "consistency --json": ["consistency", "llama-3.1-8b", "--shrink", "--json"],
    "bench consistency --json": ["bench", "consistency", "llama-3.1-8b", "--shrink", "--json"],
}


def earlier_green(path: Path, suite: str) -> None:
    junit.write(path, suite, [junit.Case("earlier-run", junit.PASSED)])


def ignored_sigint() -> None:
    """Run in the child before exec: SIGINT ignored, as ``nohup`` or a non-interactive shell's ``&`` leaves it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def stopped(
    args: list[str],
    block_at: str,
    signum: int,
    tmp_path: Path,
    *,
    program: tuple[str, ...] = ("-m", "kvdoctor"),
    junit: bool = True,
    start: Callable[[], None] = default_sigint,
    before: Callable[[int], None] | None = None,
) -> tuple[int, str, Path, Path]:
    """Run ARGS (with --junit), wait until it blocks at BLOCK_AT, send SIGNUM; (exit, stderr, junit, summary).

    The child runs ``python PROGRAM ARGS`` with START run before exec (its SIGINT disposition); BEFORE gets the
    child's pid once it is blocked, before the signal is sent. Its stdout is kept in ``tmp_path/stdout``."""
    report, summary = tmp_path / "r.xml", tmp_path / "summary.md"
    if junit:
        earlier_green(report, SUITES[args[0]])
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS",)}
    env.update(
        PYTHONPATH=os.pathsep.join([str(HOOK), env.get("PYTHONPATH", "")]),
        KVDOCTOR_TEST_BLOCK_AT=block_at,
        GITHUB_STEP_SUMMARY=str(summary),
        NO_COLOR="1",
    )
    with (tmp_path / "stdout").open("wb") as out:  # a file: a pipe nobody reads could fill and block the run
        proc = subprocess.Popen(
            [sys.executable, *program, *args, *(["--junit", str(report)] if junit else [])],
            stdout=out,
            stderr=subprocess.PIPE,
            env=env,
            preexec_fn=start,
        )
    assert proc.stderr is not None
    seen, deadline = b"", time.monotonic() + 240
    try:
        while b"\n" not in seen.partition(MARK)[2]:  # bounded poll for the whole line, never a bare sleep
            left = deadline - time.monotonic()
            assert left > 0 and proc.poll() is None, f"never reached {block_at}: {seen.decode()!r}"
            ready, _, _ = select.select([proc.stderr], [], [], min(left, 1.0))
            if ready:
                seen += os.read(proc.stderr.fileno(), 65536)
        if before is not None:
            before(proc.pid)
        proc.send_signal(signum)
        _, rest = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = (seen + rest).decode()
    return proc.returncode, err.split(MARK.decode())[-1].split("\n", 1)[-1], report, summary


def assert_error_case(report: Path, summary: Path, signum: int) -> None:
    cases = [case for suite in JUnitXml.fromfile(str(report)) for case in suite]
    assert [c.name for c in cases] == ["kvdoctor"]  # the earlier run's pass is gone
    (result,) = cases[0].result
    assert isinstance(result, Error) and signal.Signals(signum).name in result.message
    last = summary.read_text().split("### ")[-1]
    assert f"**ERROR** (exit {LINES[signum][0]})" in last and "**passed**" not in last


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("command", sorted(WORK))
def test_a_signal_during_the_work_leaves_an_error_case_and_one_line(tmp_path: Path, command: str, signum: int) -> None:
    """Before: exit 130/143 with the earlier green JUnit in place; roundtrip's SIGTERM said nothing."""
    args, block_at = WORK[command]
    code, err, report, summary = stopped(args, block_at, signum, tmp_path)
    assert (code, err) == (LINES[signum][0], LINES[signum][1] + "\n")
    assert_error_case(report, summary, signum)
    assert not list(tmp_path.glob(".*.tmp"))  # the atomic writer's temp files went with the run


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("command", sorted(RENDER))
def test_a_signal_between_the_work_and_the_verdict_leaves_an_error_case(
    tmp_path: Path, command: str, signum: int
) -> None:
    """The work is done and the tables are printing: the verdict is not published yet, so the JUnit must
    say this run did not finish (click turns a Ctrl-C here into a silent 130; the line is still said)."""
    args, block_at = RENDER[command]
    code, err, report, summary = stopped(args, block_at, signum, tmp_path)
    assert (code, err) == (LINES[signum][0], LINES[signum][1] + "\n")
    assert_error_case(report, summary, signum)


@pytest.mark.parametrize(
    ("command", "signum"),
    [
        ("consistency", signal.SIGTERM),
        ("consistency", signal.SIGINT),
        ("consistency --json", signal.SIGTERM),
        ("bench consistency --json", signal.SIGTERM),
    ],
    ids=["consistency-SIGTERM", "consistency-SIGINT", "consistency-json-SIGTERM", "bench-consistency-json-SIGTERM"],
)
def test_a_signal_while_servers_are_supervised_ends_with_the_one_line(
    tmp_path: Path, command: str, signum: int
) -> None:
    """Before: consistency caught SIGTERM to tear down and exited 143 without ``kvdoctor: terminated`` (the
    README's table promises it), and with --json printed its verdict line on stderr. One rule now: stdout is
    the report (the human lines ending in the verdict line, or the JSON alone, whose verdict is that line's
    word); stderr is progress and the one line of a run that ended without its verdict."""
    args = [*REAL_SERVER[command], "--output-dir", str(tmp_path / "out")]
    code, err, _, _ = stopped(args, SUPERVISED, signum, tmp_path, program=("-c", STUB_CHECKPOINT), junit=False)
    stdout = (tmp_path / "stdout").read_text()
    assert code == LINES[signum][0], err
    assert [line for line in err.splitlines() if line.startswith("kvdoctor:")] == [LINES[signum][1]], err
    assert err.endswith(LINES[signum][1] + "\n")
    assert not any(line.startswith("verdict:") for line in err.splitlines()), err  # never on stderr
    if command.startswith("bench"):
        assert stdout == ""  # no number from a run that did not happen (kvdoctor.bench.consistency.refuse)
    elif "--json" in command:
        doc = json.loads(stdout)  # the JSON alone
        assert (doc["verdict"], doc["exit_code"], doc["exit_reason"]) == ("error", code, "interrupted")
    else:
        assert stdout.splitlines()[-1].startswith("verdict: ERROR — interrupted by"), stdout


def test_started_with_sigint_ignored_it_stays_ignored_and_sigterm_still_stops_it(tmp_path: Path) -> None:
    """What README.md says of a run started with SIGINT ignored (nohup, a non-interactive shell's ``&``):
    Python's rule, the SIGINT stays ignored (the kernel discards it on sending), and SIGTERM still stops the
    run with its error case and one line."""

    def sigint_first(pid: int) -> None:
        ignored = int(
            next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("SigIgn:")).split()[1],
            16,
        )
        assert ignored & (1 << (signal.SIGINT - 1)), "the child should have started with SIGINT ignored"
        os.kill(pid, signal.SIGINT)  # ignored: discarded when sent; had it acted, the exit would be 130

    args, block_at = WORK["inspect"]
    code, err, report, summary = stopped(
        args, block_at, signal.SIGTERM, tmp_path, start=ignored_sigint, before=sigint_first
    )
    assert (code, err) == (143, "kvdoctor: terminated\n")
    assert_error_case(report, summary, signal.SIGTERM)


def test_a_sigterm_the_parent_ignores_stays_ignored() -> None:
    """The handler is installed only over SIGTERM's default action: ``nohup``-style callers keep theirs."""
    code = (
        "import signal, sys; from kvdoctor.cli import errors; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); errors.signals_handled().__enter__(); "
        "sys.exit(0 if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN else 1)"
    )
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_an_abort_is_exit_2_and_one_line_never_a_failed_gate(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """typer raises Abort for an EOF at a prompt: no verdict was reached, so it is never exit 1 ("a gate
    failed"), and it says so in kvdoctor's one line."""
    import types

    import typer

    from kvdoctor.cli import app as entry

    def main(**_kw: object) -> int:
        raise typer.Abort()

    monkeypatch.setattr(entry.typer.main, "get_command", lambda _app: types.SimpleNamespace(main=main))
    assert entry._run([]) == 2
    assert capsys.readouterr().err == "kvdoctor: error: aborted (end of input)\n"
