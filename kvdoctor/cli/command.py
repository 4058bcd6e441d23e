"""The one shape every command runs in: check, preflight, work, deliver, the status line, the exit code.

``inspect``, ``roundtrip``, ``drift``, ``pd-eval`` and ``consistency`` each used to restate it; a command
now subclasses :class:`CommandRun`, fills in its steps, and calls it. The sequence, and what each step
owes the user, is written once here:

1. :meth:`~CommandRun.check`: the command's options, checked (bad input: one line, exit 2, nothing written);
2. :meth:`~CommandRun.preflight`: the report paths, proven writable before any work (a red verdict must
   never end as "cannot write the JUnit file", exit 2);
3. :meth:`~CommandRun.work`, under the unfinished-run error case (:meth:`~CommandRun.error_case`,
   ``kvdoctor.report.verdicts.errors_published``): bad input, a kvdoctor bug, Ctrl-C or SIGTERM there leave
   this run's JUnit error case and an ``ERROR`` step summary, never an earlier run's pass. It returns the
   result, or None when the command ends without a verdict (a dry run's plan);
4. :meth:`~CommandRun.deliver`: the command's own output (the ``--json`` document or its tables) and
   reports (JUnit, step summary, result files), in the order the command documents; it returns the
   :class:`~kvdoctor.report.reportable.Reportable` the verdict is read from;
5. the status line, ``verdict: <word> — <detail>``, on :attr:`~CommandRun.status` (None: none);
6. :meth:`~CommandRun.after`; then a result that is no verdict says its one stderr line, as an exception
   would (``kvdoctor.cli.errors.exit_on_error``): a run a signal stopped (its result says 130 or 143: the run
   caught the signal to tear its servers down) ``kvdoctor: terminated``, a deployment that failed (3) or a
   kvdoctor bug met during the run (4) ``kvdoctor: error: <detail>``; then the exit with the verdict's code.

One rule for the two streams, in every command: standard output carries the report, either the human lines
that end with the status line or, with ``--json``, the JSON object alone (its ``verdict`` is the status line's
word, so no status line is printed then, on either stream); standard error carries only progress (a long
run's lines as it works) and the one line of a run that ended without its verdict (README.md's exit codes).

All of it runs under ``kvdoctor.cli.errors.exit_on_error``: whatever escapes a step is one stderr line and
its exit code (``kvdoctor._exceptions``). Cheap to import: everything heavy is imported when a step runs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Generic, TypeVar

from kvdoctor._exceptions import EXIT_GATE, EXIT_PASS, MAX_LINE, Interrupted
from kvdoctor.api._job import ErrorCase, check_reports, recorded
from kvdoctor.cli.errors import exit_on_error, say, signal_exit
from kvdoctor.text import printable

if TYPE_CHECKING:
    from rich.console import Console

    from kvdoctor.report.reportable import Reportable

R = TypeVar("R")  # what the work returns (a command's result)
P = TypeVar("P", bound="Reportable")  # what the reporters read


class CommandRun(ABC, Generic[R, P]):
    """One run of a command. Subclasses define :meth:`work` and :meth:`deliver`, and the other steps
    they need; calling the instance runs the steps in the order the module docstring gives."""

    status: Console | None = None  # where the status line goes (stdout); None: nowhere (--json on stdout)

    def check(self) -> None:
        """Check the options before anything else (nothing is written when they are wrong)."""

    def preflight(self) -> None:
        """Prove the report paths writable before any work."""

    def error_case(self) -> ErrorCase | None:
        """Where an unfinished run leaves its error case; None: the command keeps none."""
        return None

    @abstractmethod
    def work(self) -> R | None:
        """Do the run; None when the command ended without a verdict to publish (a dry run)."""

    @abstractmethod
    def deliver(self, result: R) -> P:
        """Print the result and write its reports; return what the verdict is read from."""

    def after(self, published: P) -> None:
        """After the status line, before the exit."""

    def said(self, published: P) -> bool:
        """Whether delivering PUBLISHED already said its one stderr line (a report that could not be written)."""
        return False

    def __call__(self) -> None:
        import typer

        with exit_on_error():
            self.check()
            self.preflight()
            with recorded(self.error_case()):
                result = self.work()
            if result is None:
                return
            published = self.deliver(result)
            if self.status is not None:
                print_status(self.status, published)
            self.after(published)
            if not self.said(published):
                say_unfinished(published)
            if published.exit_code:
                raise typer.Exit(published.exit_code)


def say_unfinished(published: Reportable) -> None:
    """The one stderr line of a result that is no verdict (README.md's exit codes): ``kvdoctor: terminated`` for
    a run that caught a signal to tear down (128 + N), ``kvdoctor: error: <detail>`` for 2, 3 or 4; a verdict
    (0, 1) says nothing here. With ``--json`` this line is the only place stderr names what went wrong."""
    code = published.exit_code
    signum = Interrupted.signal_of(code)
    if signum is not None:
        say(signal_exit(signum)[0])
    elif code not in (EXIT_PASS, EXIT_GATE):
        detail = printable(published.detail().splitlines()[0] if published.detail() else f"exit {code}")
        line = f"kvdoctor: error: {detail}"
        say(line if len(line) <= MAX_LINE else f"{line[: MAX_LINE - 1]}…", detail)


def print_status(console: Console, published: Reportable) -> None:
    """The one status line for PUBLISHED: its verdict's word, then its detail."""

    from kvdoctor.cli.verdict import print_verdict  # rich: not loaded by a --json run, which prints no status line

    print_verdict(console, published.verdict, published.detail())


__all__ = ["CommandRun", "ErrorCase", "check_reports", "print_status", "say_unfinished"]
