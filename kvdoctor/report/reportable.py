"""The one protocol every reporter reads a command's result through (JSON, status line, JUnit, step summary).

Like pytest's reporters, which see a test only through its report object, kvdoctor's reporters never ask
which command ran: each command's result is published through a :class:`Reportable`, and the functions
below turn any one into the ``--json`` document, the verdict of the last line, the JUnit file and the
GitHub step summary. What differs between commands (which cases, which rows, which body) lives with the
result; how each output is spelled lives here once, so no two outputs of one run can disagree.

The verdict is never stored: it is ``Verdict.of(exit_code, warnings=len(warnings))``, the same rule the
JSON header applies, so the last line, the summary's headline and the ``verdict`` key say one word.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.report import envelope, github, verdicts

if TYPE_CHECKING:
    from kvdoctor.report import junit


class Reportable(Protocol):
    """What a command's result tells the reporters.

    Data members may be attributes or properties of the implementing class. A class that subclasses this
    protocol inherits the defaults at the end (classname, argv fallback, headline, details); the rest each
    result defines.
    """

    command: str  # the JSON header's ``command`` (``pd-eval``)
    suite: str  # the JUnit test suite (``kvdoctor pd-eval``, ``kvdoctor.inspect``)
    title: str  # the step summary's heading
    exit_code: int  # what the process exits with; the verdict and every output follow it
    warnings: Sequence[str]  # findings reported but not gated (they make an exit-0 verdict ``warn``)
    engine: EngineRef | None  # who answered (the JSON header's ``engine``); None: kvdoctor's model
    rules_revision: str | None  # the rule model's revision the JSON header names, if the command used it

    def body(self) -> Any:
        """The JSON-able keys after the header (a dataclass or a mapping)."""
        ...

    def detail(self) -> str:
        """What the one status line says after its verdict word."""
        ...

    def junit_cases(self) -> Sequence[junit.Case]:
        """One case per check; a case fails or errs exactly when the exit code says so."""
        ...

    def summary_rows(self) -> Sequence[github.Row]:
        """The step summary's check | value | threshold | result rows."""
        ...

    # -- defaults, inherited by a class that subclasses the protocol --

    classname: str = "kvdoctor"  # the JUnit cases' classname

    @property
    def verdict(self) -> envelope.Verdict:
        """The one word for the outcome (the JSON ``verdict``, the last line, the summary's headline)."""
        return envelope.Verdict.of(self.exit_code, warnings=len(self.warnings))

    def argv_fallback(self) -> Sequence[str]:
        """The command line the JSON header names when the entry point recorded none (in-process callers)."""
        return (self.command,)

    def summary_head(self) -> str:
        """The step summary's status line: the verdict word, in bold."""
        return f"**{self.verdict.word}**"

    def summary_details(self) -> Mapping[str, str]:
        """Collapsed blocks under the summary's table (a failure's log tail, a launch plan)."""
        return {}

    # -- what a Python caller reads (``kvdoctor.api``): the same verdict, said once --

    @property
    def passed(self) -> bool:
        """Exit 0: the check ran its subject and found nothing gated (``warn`` passes too)."""
        return self.exit_code == 0

    def explain_lines(self) -> Sequence[str]:
        """The lines that say why, under the verdict line: each case that did not pass, then each warning."""
        out = [f"{c.name}: {c.message}" for c in self.junit_cases() if c.status != "passed" and c.message]
        return out + [f"warning: {w}" for w in self.warnings]

    def explain(self) -> str:
        """The verdict line (``verdict: <word> — <detail>``, as the terminal ends), then :meth:`explain_lines`."""
        return "\n".join([envelope.verdict_line(self.verdict, self.detail()), *self.explain_lines()])

    def __repr__(self) -> str:
        """One line: the command, the verdict line and the first reason (pytest shows it under a failed
        ``assert report.passed``)."""
        why = self.explain_lines()
        first = f"; {why[0]}" if why else ""
        return f"<kvdoctor {self.command}: {envelope.verdict_line(self.verdict, self.detail())}{first}>"

    def to_json(self) -> str:
        """The ``--json`` document (``kvdoctor schema <command>``), as text."""
        from kvdoctor.report import serialize

        return serialize.dumps(json_document(self))


def header(result: Reportable) -> envelope.RunHeader:
    """The shared JSON header for RESULT."""
    return envelope.header(
        result.command,
        exit_code=result.exit_code,
        warnings=result.warnings,
        engine=result.engine,
        rules_revision=result.rules_revision,
        argv_fallback=result.argv_fallback(),
    )


def json_document(result: Reportable, head: envelope.RunHeader | None = None) -> dict[str, Any]:
    """What ``--json`` prints (and ``result.json`` holds): the header's keys, then the body's."""
    return envelope.document(head or header(result), result.body())


def step_summary(result: Reportable) -> str:
    """RESULT's GitHub step summary: title, headline, the rows, then the details."""
    return github.summary_markdown(result.title, result.summary_head(), result.summary_rows(), result.summary_details())


def publish(result: Reportable, *, junit_path: Path | None, env: Mapping[str, str] | None = None) -> Path | None:
    """Write RESULT's JUnit file (when asked) and append its step summary (when ``$GITHUB_STEP_SUMMARY`` is
    set), through ``kvdoctor.report.verdicts.publish``; returns the summary file written, if any. Each
    report is made only when it is written: a run with neither asks RESULT for no cases and no rows (and
    imports no JUnit writer)."""
    return verdicts.publish(
        result.suite,
        result.junit_cases() if junit_path is not None else (),
        step_summary(result) if github.step_summary_file(env) else "",
        junit_path=junit_path,
        classname=result.classname,
        env=env,
        exit_code=result.exit_code,
    )
