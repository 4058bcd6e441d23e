"""``kvdoctor inspect``'s result as the shared reports: the ``--json`` document, JUnit cases, step-summary rows.

Every mode of ``inspect`` (the SGLang rule model, ``--engine sglang`` beside it or alone when kvdoctor
refused, ``--server vllm`` with or without ``--engine vllm``) is published through one :class:`Report`
(the ``kvdoctor.report.reportable`` protocol). The model's fact rows of the step summary are the one part
that depends on the server; the command that built the report hands them in (:func:`sglang_facts`,
:func:`vllm_facts`), so nothing here asks which type it was given.

Exit 1 only under ``--strict`` with an error hazard (engine drift is one); otherwise ungated hazards are
the run's ``warnings`` and the verdict is ``warn``. JUnit and the summary fail exactly when the exit code
does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kvdoctor._exceptions import EXIT_GATE, EXIT_PASS
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.core.record import record
from kvdoctor.core.registry import ungated
from kvdoctor.report.reportable import Reportable

if TYPE_CHECKING:
    from kvdoctor.core.registry import Hazard
    from kvdoctor.core.sglang.inspect_result import InspectReport
    from kvdoctor.core.vllm.analysis import VllmReport
    from kvdoctor.report import github, junit

# The JUnit cases and the step-summary rows are made only when their report is written
# (``reportable.publish``): ``junit`` and ``github`` are imported by the functions that make them, so a
# plain ``inspect`` (tables, or --json) loads neither.

COMMAND = "inspect"
SUITE = "kvdoctor.inspect"  # the JUnit suite (and the unfinished-run record's)
VERDICT_CASE = "no-error-hazards"  # the JUnit case that carries the error-hazard verdict (its name is a contract)
# What explain() calls that case when it fails: its JUnit name reads as the opposite ("no error hazards").
VERDICT_CASE_FAILED = "error hazards (--strict)"


def _hazard_status(severity: str, gated: bool) -> str:
    """An error hazard fails a case exactly when it fails the command (``--strict``): JUnit and the
    step summary must agree with the exit code; ungated, it is reported in the case's output."""
    from kvdoctor.report import junit

    return junit.FAILED if severity == "error" and gated else junit.PASSED


def _not_gated_note(severity: str, gated: bool) -> str:
    if severity == "error" and not gated:
        return " (error hazard not gated: pass --strict to fail on it)"
    if severity == "warning":
        return " (warning: reported, never gated)"
    return ""


def cases(hazards: Sequence[Hazard], *, gated: bool) -> list[junit.Case]:
    """One case per hazard, plus the error-hazard verdict as its own case; errors fail only when GATED
    (``--strict``), otherwise each case carries the hazard, marked as not gated, as its output."""
    from kvdoctor.report import junit

    out = []
    for h in hazards:
        status = _hazard_status(h.severity, gated)
        out.append(
            junit.Case(
                h.code,
                status,
                message=h.message if status == junit.FAILED else "",
                details=f"{h.severity}: {h.message}{_not_gated_note(h.severity, gated)}",
            )
        )
    errors = [h.code for h in hazards if h.severity == "error"]
    note = " (not gated: pass --strict to fail on them)" if errors and not gated else ""
    out.append(
        junit.Case(
            VERDICT_CASE,
            junit.FAILED if errors and gated else junit.PASSED,
            message=", ".join(errors) if errors and gated else "",
            details=", ".join(errors) + note,
        )
    )
    return out


def hazard_rows(hazards: Sequence[Hazard], *, gated: bool) -> list[github.Row]:
    """One step-summary row per hazard (an ungated error or a warning is a passing row whose value says so)."""
    from kvdoctor.report import github, junit

    out = []
    for h in hazards:
        status = _hazard_status(h.severity, gated)
        value = h.severity
        if status == junit.PASSED and h.severity in ("error", "warning"):  # reported, not gated: a warning row
            value += " (not gated)" if h.severity == "error" else " (reported, not gated)"
            status = "warning"
        out.append(github.Row(h.code, value, "no error", status))
    return out


def sglang_facts(report: InspectReport) -> tuple[github.Row, ...]:
    """The SGLang rule model's facts for the step summary: family, retraction backup, PD state types."""
    from kvdoctor.report import github, junit

    backup = report.retraction_backup
    applies = "yes" if backup.applies else "no"
    return (
        github.Row("family", report.model.family, "", junit.PASSED),
        github.Row("retraction backup", f"{backup.backend} (applies: {applies})", "", junit.PASSED),
        github.Row("PD state types", ", ".join(report.pd_state_types) or "–", "", junit.PASSED),
    )


def vllm_facts(report: VllmReport) -> tuple[github.Row, ...]:
    """The vLLM rule model's facts for the step summary: family, hybrid KV cache manager, preemption."""
    from kvdoctor.report import github, junit

    hma = report.hybrid_kv_cache_manager
    return (
        github.Row("family", report.model.family, "", junit.PASSED),
        github.Row("hybrid KV cache manager", "on" if hma.enabled else "off", "", junit.PASSED),
        github.Row("preemption", f"{report.preemption.mode}, no backup", "", junit.PASSED),
    )


def verdict_detail(hazards: Sequence[Hazard], *, strict: bool, drifts: int = 0, engine: str = "") -> str:
    """What the one verdict line says after the word: the hazards by severity, and whether they gate.

    Short on purpose: the line should fit 80 columns, where a CI log shows it last."""
    errors = sum(h.severity == "error" for h in hazards)
    warnings = sum(h.severity == "warning" for h in hazards)
    parts = []
    if errors:
        parts.append(f"{errors} error hazard{'s' * (errors != 1)}" + (" (--strict)" if strict else " not gated"))
    else:
        parts.append("no error hazards")
    if warnings:
        parts.append(f"{warnings} warning{'s' * (warnings != 1)}")
    if engine:
        parts.append(
            f"{drifts} field{'s' * (drifts != 1)} drift from {engine}" if drifts else f"no drift from {engine}"
        )
    return "; ".join(parts)


@record(frozen=True, repr=False)  # repr: the protocol's one line (what a failed assert shows)
class Report(Reportable):
    """One ``inspect`` answer as every reporter reads it (``kvdoctor.report.reportable``).

    REPORT is the typed result of any mode (it has ``hazards`` and ``rules_revision``); FACTS makes the
    model's step-summary rows from it (its command's function, called only when a summary is written);
    ARGV the command line when the entry point recorded none.
    """

    report: Any
    title: str
    strict: bool
    engine: EngineRef | None  # who answered beside kvdoctor; None: the rule model alone
    drifts: int
    facts: Callable[[Any], Sequence[github.Row]]
    argv: tuple[str, ...]
    command = COMMAND
    suite = SUITE

    @property
    def exit_code(self) -> int:
        failed = self.strict and any(h.severity == "error" for h in self.report.hazards)
        return EXIT_GATE if failed else EXIT_PASS

    @property
    def warnings(self) -> Sequence[str]:
        return ungated(self.report.hazards, strict=self.strict)

    @property
    def rules_revision(self) -> str | None:
        return self.report.rules_revision

    def argv_fallback(self) -> Sequence[str]:
        return self.argv

    def body(self) -> Any:
        return self.report

    def detail(self) -> str:
        engine = self.engine
        name = "" if engine is None or engine.name == "kvdoctor" else f"{engine.name} {engine.version}"
        return verdict_detail(self.report.hazards, strict=self.strict, drifts=self.drifts, engine=name)

    def junit_cases(self) -> list[junit.Case]:
        return cases(self.report.hazards, gated=self.strict)

    def explain_lines(self) -> Sequence[str]:
        """As every report's, but the failed verdict case is named for what it found: ``error hazards
        (--strict): KVD014-..., KVD001-...``, never its JUnit name (``no-error-hazards: KVD014...``)."""
        head = f"{VERDICT_CASE}: "
        return [
            f"{VERDICT_CASE_FAILED}: {line[len(head) :]}" if line.startswith(head) else line
            for line in super().explain_lines()
        ]

    def summary_rows(self) -> list[github.Row]:
        return [*self.facts(self.report), *hazard_rows(self.report.hazards, gated=self.strict)]
