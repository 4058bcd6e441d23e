"""``kvdoctor drift``'s result as the shared reports: the ``--json`` document, JUnit cases, step-summary rows.

All read one :class:`~kvdoctor.core.drift_result.DriftReport` through :class:`Report` (the
``kvdoctor.report.reportable`` protocol), whichever server was compared against (SGLang, vLLM: the report's
``server``). A cell fails in JUnit exactly when it drifts, and the command exits 1 exactly when one does, so
the CI file and the exit code cannot disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvdoctor._exceptions import EXIT_GATE, EXIT_PASS
from kvdoctor.core.drift_result import ArchitectureTotals, CaseResult, Disagreement, DriftReport, server_answer
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
    drifting = sum(not m.ok for m in totals.per_model_type)
    return (
        f"{totals.registry_architectures} registry architectures, {totals.model_types} model types, "
        f"{totals.generated} generated, {totals.skipped} skipped"
        + (f" ({skipped})" if skipped else "")
        + f", {drifting} of {totals.generated} model types drifting"
    )


def verdict_detail(result: DriftReport) -> str:
    """The status line after its verdict word: the counts, then the first drifting cells."""
    counts = (
        f"{human(result.cases)} cases, {human(result.fields_compared)} fields compared, "
        f"{human(result.drifting_cases)} drifting, {result.elapsed_s:.1f} s"
    )
    totals = architectures_of(result)
    if totals is not None:
        counts = f"{counts}; {architectures_line(totals)}"
    if result.ok:
        return counts
    names = ", ".join(f"{r.model} · {r.case}" for r in result.drifting[:5])
    more = f" and {len(result.drifting) - 5} more" if len(result.drifting) > 5 else ""
    return f"{counts}: {names}{more}"


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
        return EXIT_PASS if self.result.ok or reports_only(self.result) else EXIT_GATE

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
        return [
            junit.Case(
                f"{r.model} · {r.case}",
                junit.PASSED if r.ok else junit.SKIPPED if reports_only(self.result) else junit.FAILED,
                message="; ".join(drift_line(d, self.result.server) for d in r.drift),
                time_s=r.seconds,
            )
            for r in self.result.results
        ]

    def summary_rows(self) -> list[github.Row]:
        result = self.result
        return [
            github.Row("drifting cases", str(result.drifting_cases), "0", self._status(result.ok)),
            *(
                github.Row(
                    f"{r.model} · {r.case}", ", ".join(d.field for d in r.drift), "no drift", self._status(False)
                )
                for r in result.drifting
            ),
        ]

    def _status(self, ok: bool) -> str:
        """A summary row's status: a reported (not gated) drift is a warning (its JUnit case is skipped), so
        neither says fail while the command exits 0."""
        if ok:
            return junit.PASSED
        return "warning" if reports_only(self.result) else junit.FAILED
