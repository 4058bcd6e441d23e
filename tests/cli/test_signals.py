"""Ctrl-C and SIGTERM on a run that is provably under way: one line, 130 or 143, and this run's JUnit
error case in place of the earlier run's pass (kvdoctor/cli/errors.py, kvdoctor/report/verdicts.py).

Each test starts the real CLI with ``tests/cli/block_hook`` on PYTHONPATH: its sitecustomize wraps one
function (``KVDOCTOR_TEST_BLOCK_AT``) so that the run says on stderr that it got there and then waits
for a signal. The test sends the signal once it has read that line (bounded by a deadline), so the
point the run is stopped at is known, not guessed with a sleep.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from junitparser import Error, JUnitXml

from kvdoctor.report import junit

HOOK = Path(__file__).parent / "block_hook"
MARK = b"kvdoctor-test: blocked at"
TINY_ROUNDTRIP = ["roundtrip", "inkling-small", "--device", "cpu", "--requests", "2", "--tokens", "8"]
SUITES = {"roundtrip": "kvdoctor.roundtrip", "inspect": "kvdoctor.inspect", "drift": "kvdoctor.drift"}
WORK = {  # inside the command's work (kvdoctor.report.verdicts.errors_published)
    "roundtrip": (TINY_ROUNDTRIP, "kvdoctor.state.run:run_roundtrip"),
    "inspect": (["inspect", "inkling-small"], "kvdoctor.core.sglang.analysis:analyze"),
    "drift": (["drift", "--fixture", "inkling-small"], "kvdoctor.engines.sglang.drift:run_drift"),
}
# After the work, while the tables print and before the verdict is published (verdicts.unfinished)
RENDER = {
    "roundtrip": (TINY_ROUNDTRIP, "kvdoctor.cli.verdict:print_verdict"),
    "inspect": (["inspect", "inkling-small"], "kvdoctor.cli.verdict:print_verdict"),
}
LINES = {signal.SIGINT: (130, "kvdoctor: interrupted"), signal.SIGTERM: (143, "kvdoctor: terminated")}


def earlier_green(path: Path, suite: str) -> None:
    junit.write(path, suite, [junit.Case("earlier-run", junit.PASSED)])


def stopped(args: list[str], block_at: str, signum: int, tmp_path: Path) -> tuple[int, str, Path, Path]:
    """Run ARGS with --junit, wait until it blocks at BLOCK_AT, send SIGNUM; (exit, stderr, junit, summary)."""
    report, summary = tmp_path / "r.xml", tmp_path / "summary.md"
    earlier_green(report, SUITES[args[0]])
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS",)}
    env.update(
        PYTHONPATH=os.pathsep.join([str(HOOK), env.get("PYTHONPATH", "")]),
        KVDOCTOR_TEST_BLOCK_AT=block_at,
        GITHUB_STEP_SUMMARY=str(summary),
        NO_COLOR="1",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvdoctor", *args, "--junit", str(report)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
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
