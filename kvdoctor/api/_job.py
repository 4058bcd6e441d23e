"""The steps every command's work runs in, without a terminal: check, preflight, work, report, publish.

A command's :class:`Job` holds its options and does everything the run owes beside its human output:
the options checked (one ``kvdoctor._exceptions`` error, nothing written), the report paths proven writable
before any work, the work under the unfinished-run error case (``kvdoctor.report.verdicts.errors_published``:
bad input, a kvdoctor bug, Ctrl-C or SIGTERM there leave this run's JUnit error case, never an earlier run's
pass), the typed result every reporter reads (:class:`~kvdoctor.report.reportable.Reportable`), and its
reports (JUnit when asked, the step summary when ``$GITHUB_STEP_SUMMARY`` is set). :func:`execute` runs the
steps in that order: it is what each public function of :mod:`kvdoctor.api` returns. The CLI runs the same
job's steps, printing its head, progress and tables in between (``kvdoctor.cli.command``).

No Typer, rich or process exit here, and nothing heavy at import.
"""

from __future__ import annotations

import contextlib
import enum
import shlex
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from kvdoctor._exceptions import InputError
from kvdoctor.core.record import record
from kvdoctor.report import preflight, reportable, verdicts

if TYPE_CHECKING:
    from kvdoctor.report.reportable import Reportable

R = TypeVar("R")  # what the work returns (a command's result)
P = TypeVar("P", bound="Reportable")  # what the reporters read
T = TypeVar("T")
E = TypeVar("E", bound=enum.Enum)

Progress = Callable[[str, str], None]  # (phase, message): a long run's progress, as the CLI prints it on stderr


@record(frozen=True)
class ErrorCase:
    """Where a run stopped before its verdict leaves its error case: the JUnit suite and summary title."""

    suite: str
    title: str
    junit_path: Path | None


class Job(ABC, Generic[R, P]):
    """One command's run, its options given. Subclasses define :meth:`work` and :meth:`report`, and the other
    steps they need."""

    junit_path: Path | None = None

    def check(self) -> None:
        """Check the options before anything else (nothing is written when they are wrong)."""

    def preflight(self) -> None:
        """Prove the report paths writable before any work (a red verdict must never end as "cannot write")."""
        check_reports(self.junit_path)

    def error_case(self) -> ErrorCase | None:
        """Where an unfinished run leaves its error case; None: the command keeps none."""
        return None

    @abstractmethod
    def work(self) -> R:
        """Do the run."""

    @abstractmethod
    def report(self, result: R) -> P:
        """The typed result every reporter reads (and the run's own record, where the command keeps one)."""

    def watched(self, work: Callable[[Any], T], first_step: str) -> T:
        """Run WORK (it takes a progress callback, or None); the CLI draws a progress bar from its callback."""
        return work(None)

    def publish(self, published: P) -> None:
        """PUBLISHED's JUnit file (when asked) and step summary (when ``$GITHUB_STEP_SUMMARY`` is set)."""
        reportable.publish(published, junit_path=self.junit_path)


def recorded(case: ErrorCase | None) -> contextlib.AbstractContextManager[None]:
    """The work's block: a run that stops inside it leaves CASE's error case (none without a case)."""
    if case is None:
        return contextlib.nullcontext()
    return verdicts.errors_published(case.suite, case.title, junit_path=case.junit_path)


def execute(job: Job[R, P]) -> P:
    """JOB's steps in order; its typed result, its reports written. Errors are ``kvdoctor._exceptions``'s."""
    job.check()
    job.preflight()
    with recorded(job.error_case()):
        result = job.work()
    published = job.report(result)
    job.publish(published)
    return published


def check_reports(junit_path: Path | None, output_dir: Path | None = None) -> None:
    """The usual preflight: the JUnit file (and an output directory) writable, refused in one line if not."""
    preflight.check_outputs(junit_path=junit_path, output_dir=output_dir)


def chosen(kind: type[E], value: E | str, keyword: str) -> E:
    """VALUE as KIND's member. One it has not is bad input (exit 2) naming KEYWORD and the choices, as the CLI refuses
    an option's value: a Python caller's typo is never a ``ValueError`` traceback."""
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(str(m.value) for m in kind)
        raise InputError(f"{keyword}={value!r} is not one of {choices}") from None


def names(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """A list-taking keyword's names: one string is one name (``bug="sglang#29368"``), never its characters."""
    if isinstance(value, str):
        return (value,)
    return tuple(value or ())


def flags(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """Server flags (what follows ``--`` on the command line): a list of words, or one string split as a shell does
    (``server_args="--disable-overlap-schedule"``), never its characters."""
    if isinstance(value, str):
        try:
            return tuple(shlex.split(value))
        except ValueError as exc:  # an unclosed quote
            raise InputError(f"server_args={value!r}: {exc}") from None
    return tuple(value or ())
