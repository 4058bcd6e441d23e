"""``kvdoctor drift``'s result as the shared reports: the ``--json`` document, JUnit cases, step-summary rows.

All read one :class:`~kvdoctor.core.drift_result.DriftReport` through :class:`Report` (the
``kvdoctor.report.reportable`` protocol), whichever server was compared against (SGLang, vLLM: the report's
``server``). A cell fails in JUnit exactly when it drifts, and the command exits 1 exactly when one does, so
the CI file and the exit code cannot disagree. A cell where the server's own code failed is a JUnit error, never
a failure: with no drift the run exits 3 (a check that did not run its subject is no pass), and its verdict line
(the one stderr line too) names the server's error and where it was raised, never "drifting".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvdoctor._exceptions import EXIT_DEPLOYMENT, EXIT_GATE, EXIT_PASS
from kvdoctor.core.drift_result import (
    CELL_ERROR,
    ArchitectureTotals,
    CaseResult,
    Disagreement,
    DriftReport,
    server_answer,
)
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.core.servers import DEFAULT_SERVER, facts
from kvdoctor.report import github, junit
from kvdoctor.report.reportable import Reportable
from kvdoctor.report.units import human

COMMAND = "drift"
SUITE = "kvdoctor.drift"  # the JUnit suite (and the unfinished-run record's)
TITLE = "kvdoctor drift"


def rules_revision(server: str) -> str:
    """The revision of kvdoctor's rule model for SERVER (the JSON header's ``rules_revision``): the server's
    facts (``kvdoctor.core.servers``), which ``tests/core/test_servers.py`` holds to each room's rules."""
    return facts(server).rules_revision


def drift_line(d: Disagreement, server: str = DEFAULT_SERVER.value) -> str:
    """One disagreement in words (JUnit message); raw ``repr`` so a string and a number stay apart."""
    title = facts(server).title
    return f"{d.field}: kvdoctor {d.kvdoctor!r}, {title} {server_answer(d, server)!r}"


def failed_line(case: CaseResult, title: str) -> str:
    """A cell where the server's own code failed, in words (JUnit message, summary row, the table)."""
    return f"failed inside {title}: {getattr(case, 'error', None)}"


def refusal_lines(case: CaseResult, server: str) -> list[str]:
    """Who refused the cell's launch, in their words (both when both did)."""
    title = facts(server).title
    return [
        f"{who} refuses: {why}"
        for who, why in (("kvdoctor", case.kvdoctor_refusal), (title, case.server_refusal))
        if why
    ]


def architectures_of(result: DriftReport) -> ArchitectureTotals | None:
    """The registry's totals of a ``--all-architectures`` run (None: a fixture run)."""
    return getattr(result, "architectures", None)


def reports_only(result: DriftReport) -> bool:
    """A generated-set run without ``--strict``: its drift is reported (exit 0, verdict warn), not gated."""
    totals = architectures_of(result)
    return totals is not None and not totals.strict


def architectures_line(totals: ArchitectureTotals) -> str:
    """The registry's totals in one line (after the verdict's counts)."""
    skipped = ", ".join(f"{why}: {n}" for why, n in totals.skipped_by_reason.items())
    drifting = sum(m.drifting_cells > 0 for m in totals.per_model_type)
    failed = sum(m.error_cells > 0 for m in totals.per_model_type)
    return (
        f"{totals.registry_architectures} registry architectures, {totals.model_types} model types, "
        f"{totals.generated} generated, {totals.skipped} skipped"
        + (f" ({skipped})" if skipped else "")
        + f", {drifting} of {totals.generated} model types drifting"
        + (f", {failed} with errors" if failed else "")
    )


def gated(result: DriftReport) -> bool:
    """A cell drifts and the drift gates (exit 1): a fixture run, or the generated set with ``--strict``."""
    return bool(result.drifting) and not reports_only(result)


def exit_code(result: DriftReport) -> int:
    """The one rule, for the CLI and the API alike: gated drift exits 1; otherwise a cell where the server's own
    code failed exits 3 (the check did not run its subject there: never a pass); otherwise 0 (reported drift of
    the generated set without ``--strict`` too, verdict warn)."""
    if gated(result):
        return EXIT_GATE
    return EXIT_DEPLOYMENT if result.errored else EXIT_PASS


def errors_line(result: DriftReport) -> str:
    """``N of M cases failed inside <server> (<the most common error, with where>)``, and how many others."""
    errors = result.errors()
    first, _ = errors[0]
    others = len(errors) - 1
    more = f"; {others} other error{'s' if others > 1 else ''}" if others else ""
    failed = f"{human(len(result.errored))} of {human(result.cases)} cases"
    return f"{failed} failed inside {result.server_title} ({first}{more})"


def cells_named(cells: Sequence[CaseResult]) -> str:
    """The first five cells by name, and how many more."""
    names = ", ".join(f"{r.model} · {r.case}" for r in cells[:5])
    return names + (f" and {len(cells) - 5} more" if len(cells) > 5 else "")


def verdict_detail(result: DriftReport) -> str:
    """The status line after its verdict word: the counts, then the first drifting cells. When the server's own
    code failed and nothing gates, the line starts with that failure (it is the one stderr line of exit 3), and
    says "drifting" only of cells that drifted."""
    totals = architectures_of(result)
    after = f"; {architectures_line(totals)}" if totals is not None else ""
    if result.errored and not gated(result):
        drifting = f", {human(result.drifting_cases)} drifting" if result.drifting else ""
        compared = f"{human(result.fields_compared)} fields compared{drifting}, {result.elapsed_s:.1f} s"
        line = f"{errors_line(result)}; {compared}"
        partly = len(result.errored) < result.cases
        return f"{line}{after}" + (f": {cells_named(result.errored)}" if partly else "")
    failed = f", {human(result.error_cases)} failed inside {result.server_title}" if result.errored else ""
    counts = (
        f"{human(result.cases)} cases, {human(result.fields_compared)} fields compared, "
        f"{human(result.drifting_cases)} drifting{failed}, {result.elapsed_s:.1f} s{after}"
    )
    if not result.drifting:
        return counts
    return f"{counts}: {cells_named(result.drifting)}"


@dataclass(frozen=True, repr=False)  # repr: the protocol's one line (what a failed assert shows)
class Report(Reportable):
    """A drift run as every reporter reads it (``kvdoctor.report.reportable``)."""

    result: DriftReport
    command = COMMAND
    suite = SUITE
    title = TITLE

    @property
    def warnings(self) -> Sequence[str]:
        # A fixture cell agrees or drifts (gated). A generated-set cell without --strict is reported: each
        # drifting one is a warning, so the verdict says warn, never pass, when any drifts.
        if not reports_only(self.result):
            return ()
        return [
            f"{r.model} · {r.case}: " + "; ".join(drift_line(d, self.result.server) for d in r.drift)
            for r in self.result.drifting
        ]

    @property
    def exit_code(self) -> int:
        return exit_code(self.result)

    @property
    def engine(self) -> EngineRef:
        return self.result.engine  # the installed server compared against

    @property
    def rules_revision(self) -> str:
        return rules_revision(self.result.server)

    def body(self) -> DriftReport:
        return self.result

    def detail(self) -> str:
        return verdict_detail(self.result)

    def junit_cases(self) -> list[junit.Case]:
        return [self._junit_case(r) for r in self.result.results]

    def _junit_case(self, r: CaseResult) -> junit.Case:
        name = f"{r.model} · {r.case}"
        if r.status == CELL_ERROR:  # the server's code failed: the check never ran (an error, not a failure)
            return junit.Case(name, junit.ERROR, message=failed_line(r, self.result.server_title), time_s=r.seconds)
        return junit.Case(
            name,
            junit.PASSED if r.ok else junit.SKIPPED if reports_only(self.result) else junit.FAILED,
            message="; ".join(drift_line(d, self.result.server) for d in r.drift),
            time_s=r.seconds,
        )

    def summary_rows(self) -> list[github.Row]:
        result = self.result
        rows = [github.Row("drifting cases", str(result.drifting_cases), "0", self._status(not result.drifting))]
        if result.errored:
            rows.append(
                github.Row(f"cases failed inside {result.server_title}", str(result.error_cases), "0", junit.ERROR)
            )
        rows += [
            github.Row(f"{r.model} · {r.case}", ", ".join(d.field for d in r.drift), "no drift", self._status(False))
            for r in result.drifting
        ]
        rows += [
            github.Row(f"{r.model} · {r.case}", failed_line(r, result.server_title), "no error", junit.ERROR)
            for r in result.errored
        ]
        return rows

    def _status(self, ok: bool) -> str:
        """A summary row's status: a reported (not gated) drift is a warning (its JUnit case is skipped), so
        neither says fail while the command exits 0."""
        if ok:
            return junit.PASSED
        return "warning" if reports_only(self.result) else junit.FAILED
