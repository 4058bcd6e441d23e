"""Writing a run's CI reports (the JUnit file and the GitHub step summary), and the unfinished-run record.

What a command's reports hold (its cases and rows) lives with its result's ``Report``
(``kvdoctor.report.reportable``); :func:`publish` writes them, and :func:`errors_published` /
:func:`unfinished` make sure a run that ends without its verdict leaves this run's error case, never an
earlier run's pass.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kvdoctor._exceptions import EXIT_GATE, EXIT_PASS, InputError, InternalError, Interrupted, KvdoctorError
from kvdoctor.core.record import record
from kvdoctor.report.envelope import Verdict
from kvdoctor.text import printable

if TYPE_CHECKING:
    from kvdoctor.report import junit

# The writers (``junit``, ``github``) are imported when a report is written, not with this module: every
# command enters ``errors_published``, and a run that writes no report must not pay for them.


def publish(
    suite: str,
    cases: Sequence[junit.Case],
    summary: str,
    *,
    junit_path: Path | None,
    classname: str = "kvdoctor",
    env: Mapping[str, str] | None = None,
    exit_code: int | None = None,
) -> Path | None:
    """Write the JUnit file when asked and append SUMMARY to ``$GITHUB_STEP_SUMMARY`` when it is set.

    Returns the summary file written, if any. A path that cannot be written is the user's input
    error (exit 2), never an OSError traceback; every command's reports share this contract.
    EXIT_CODE is the code these reports stand for (a run whose own reports say "deployment failed",
    exit 3): the process ending with it keeps them (``unfinished``).
    """
    from kvdoctor.report import github

    try:
        if junit_path is not None:
            from kvdoctor.report import junit

            junit.write(junit_path, suite, cases, classname=classname)
        written = github.append_step_summary(summary, env)
    except OSError as exc:
        raise InputError(f"cannot write a report: {exc}") from None
    if _RUN is not None and _RUN.suite == suite and _RUN.state == _OPEN:
        _RUN.state = _VERDICT
        _RUN.exit_code = exit_code
    return written


# The run whose reports are not final yet (``errors_published`` opens it): ``open`` until its verdict
# is published, ``verdict`` after, ``error`` once an error case replaced it. ``unfinished`` reads it
# when the process ends, so a run stopped between its work and its verdict (a signal, output that
# could not be delivered) still leaves this run's error case, not an earlier run's pass.
_OPEN, _VERDICT, _ERROR = "open", "verdict", "error"


@record
class _Run:
    """The run under way: where its error case goes if it stops before its verdict."""

    suite: str
    title: str
    junit_path: Path | None
    state: str = _OPEN
    exit_code: int | None = None  # the code the published verdict stands for, when its publisher said


_RUN: _Run | None = None


def forget() -> None:
    """A new run starts (the CLI may run more than once in one process): no run is open."""
    global _RUN
    _RUN = None


def run_error(exc: BaseException) -> tuple[int, str]:
    """The exit code and the words of a run that EXC stopped before its verdict."""
    if isinstance(exc, (KeyboardInterrupt, Interrupted)):
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        return Interrupted.exit_code_for(signum), _stopped_by(signum)
    error = exc if isinstance(exc, KvdoctorError) else InternalError.wrap(exc)
    return error.exit_code, printable(error)


def _stopped_by(signum: int) -> str:
    return f"{Interrupted.word(signum)} ({signal.Signals(signum).name}) before the run finished"


def _publish_error(run: _Run, exit_code: int, message: str) -> None:
    from kvdoctor.report import github, junit

    verdict = Verdict.of(exit_code)
    status = junit.FAILED if exit_code == EXIT_GATE else junit.ERROR  # a finding (exit 1) fails; the rest errs
    case = junit.Case("kvdoctor", status, message=message, details=message)
    head = f"**{verdict.word}** (exit {exit_code}): {github.text(message)}"  # the message is outside text
    run.state = _ERROR
    with contextlib.suppress(KvdoctorError):  # the run's own error is what the user must see
        publish(run.suite, [case], github.summary_markdown(run.title, head, []), junit_path=run.junit_path)


@contextlib.contextmanager
def errors_published(suite: str, title: str, *, junit_path: Path | None) -> Iterator[None]:
    """Run a command's work; if it ends without a verdict (bad input, exit 2; a kvdoctor bug, exit 4;
    Ctrl-C, 130; SIGTERM, 143), say so in the JUnit file and the step summary too, then let the error
    go on to its one line.

    Without this, the run that exits 2 writes nothing and a JUnit file left by an earlier green run
    would still be read as this run's pass. Enter it only once the report paths themselves were
    checked (``report.preflight``): a path that cannot be written is the error then, not a report.
    The run stays open after the block until its verdict is published; ``unfinished`` covers the
    stretch in between (rendering, writing stdout).
    """
    global _RUN
    run = _RUN = _Run(suite, title, junit_path)
    try:
        yield
    except (Exception, KeyboardInterrupt, Interrupted) as exc:
        _publish_error(run, *run_error(exc))
        raise


def unfinished(exit_code: int, reason: str | None) -> None:
    """At the end of the process: a run still open (or whose verdict the exit code contradicts: output
    lost, a signal after the verdict) gets its error case now. Exit 0 and 1 keep a published verdict, and
    so does the very code it was published for (a run whose own reports say its deployment failed)."""
    global _RUN
    run, _RUN = _RUN, None
    if run is None or exit_code == EXIT_PASS or run.state == _ERROR:
        return
    if run.state == _VERDICT and exit_code in (EXIT_GATE, run.exit_code):
        return
    signum = Interrupted.signal_of(exit_code)
    if signum in (signal.SIGINT, signal.SIGTERM):  # a signal: said the way errors_published says it
        reason = _stopped_by(signum)
    _publish_error(run, exit_code, reason or f"the run did not finish (exit {exit_code})")
