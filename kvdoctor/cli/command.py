"""The one shape every command runs in: check, preflight, work, deliver, the status line, the exit code.

``inspect``, ``roundtrip``, ``drift``, ``pd-eval`` and ``consistency`` each used to restate it; a command
now subclasses :class:`CommandRun`, fills in its steps, and calls it. The sequence, and what each step
owes the user, is written once here:

1. :meth:`~CommandRun.check`: the command's options, checked (bad input: one line, exit 2, nothing written);
2. :meth:`~CommandRun.preflight`: the report paths, proven writable before any work (a red verdict must
   never end as "cannot write the JUnit file", exit 2);
3. :meth:`~CommandRun.work`, under the unfinished-run record (:meth:`~CommandRun.record`,
   ``kvdoctor.report.verdicts.errors_published``): bad input, a kvdoctor bug, Ctrl-C or SIGTERM there leave
   this run's JUnit error case and an ``ERROR`` step summary, never an earlier run's pass. It returns the
   result, or None when the command ends without a verdict (a dry run's plan);
4. :meth:`~CommandRun.deliver`: the command's own output (the ``--json`` document or its tables) and
   reports (JUnit, step summary, result files), in the order the command documents; it returns the
   :class:`~kvdoctor.report.publishable.Publishable` the verdict is read from;
5. the status line, ``verdict: <word> — <detail>``, on :attr:`~CommandRun.status` (None: none);
6. :meth:`~CommandRun.after`, then the exit with the verdict's code.

All of it runs under ``kvdoctor.cli.errors.exit_on_error``: whatever escapes a step is one stderr line and
its exit code (``kvdoctor._exceptions``). Cheap to import: everything heavy is imported when a step runs.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

from kvdoctor.cli.errors import exit_on_error
from kvdoctor.core.record import record

if TYPE_CHECKING:
    from rich.console import Console

    from kvdoctor.report.publishable import Publishable

R = TypeVar("R")  # what the work returns (a command's result)
P = TypeVar("P", bound="Publishable")  # what the reporters read


@record(frozen=True)
class Record:
    """Where a run stopped before its verdict leaves its error case: the JUnit suite and summary title."""

    suite: str
    title: str
    junit_path: Path | None


class CommandRun(ABC, Generic[R, P]):
    """One run of a command. Subclasses define :meth:`work` and :meth:`deliver`, and the other steps
    they need; calling the instance runs the steps in the order the module docstring gives."""

    status: Console | None = None  # where the status line goes; None: nowhere (e.g. --json on stdout)

    def check(self) -> None:
        """Check the options before anything else (nothing is written when they are wrong)."""

    def preflight(self) -> None:
        """Prove the report paths writable before any work."""

    def record(self) -> Record | None:
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

    def __call__(self) -> None:
        import typer

        with exit_on_error():
            self.check()
            self.preflight()
            record = self.record()
            with _recorded(record) if record is not None else contextlib.nullcontext():
                result = self.work()
            if result is None:
                return
            published = self.deliver(result)
            if self.status is not None:
                print_status(self.status, published)
            self.after(published)
            if published.exit_code:
                raise typer.Exit(published.exit_code)


def _recorded(record: Record) -> contextlib.AbstractContextManager[None]:
    from kvdoctor.report.verdicts import errors_published

    return errors_published(record.suite, record.title, junit_path=record.junit_path)


def print_status(console: Console, published: Publishable) -> None:
    """The one status line for PUBLISHED: its verdict's word, then its detail."""
    from kvdoctor.cli.verdict import print_verdict

    print_verdict(console, published.verdict, published.detail())


def check_reports(junit_path: Path | None, output_dir: Path | None = None) -> None:
    """The usual preflight: the JUnit file (and an output directory) writable, refused in one line if not."""
    from kvdoctor.report.preflight import check_outputs

    check_outputs(junit_path=junit_path, output_dir=output_dir)
