"""``kvdoctor roundtrip``'s result as the shared reports: the ``--json`` document, JUnit cases, step-summary rows.

All read one :class:`~kvdoctor.roundtrip.result.RoundtripResult` through :class:`Report` (the
``kvdoctor.report.reportable`` protocol). A case fails exactly when its row does, and the command exits 1
exactly when a row fails, so JUnit, the summary and the exit code agree. Launch-line errors SGLang would
refuse are reported, not gated: a passing case each, saying so, and a warning in the JSON header.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.core.record import record
from kvdoctor.report import github, junit
from kvdoctor.report.reportable import Reportable
from kvdoctor.roundtrip.result import RoundtripResult

COMMAND = "roundtrip"
SUITE = "kvdoctor.roundtrip"  # the JUnit suite (and the unfinished-run record's)


def title(model: str) -> str:
    """The step summary's heading (and the unfinished-run record's): the model as the user named it."""
    return f"kvdoctor roundtrip {model}"


def warnings(result: RoundtripResult) -> list[str]:
    """Findings reported but not gated: the launch line's error hazards (the copy still ran). Spelled
    as ``inspect`` spells its warnings: ``CODE (severity): message``."""
    return [f"{h.code} ({h.severity}): {h.message}" for h in result.hazards]


def verdict_detail(result: RoundtripResult) -> str:
    """What the verdict line says after its word."""
    if result.ok:
        detail = f"{len(result.components)} components equal"
        if result.hazards:
            detail += f"; {len(result.hazards)} launch-line error hazard(s), not gated (see above)"
        return f"{detail} ({result.elapsed_s:.2f} s)"
    detail = f"differs: {', '.join(result.failing)}"
    if result.inject_matched is True:
        detail += f" (--inject {result.injected} caught where expected)"
    elif result.inject_matched is False:
        detail += f" (--inject {result.injected} did not break exactly its targets, see above)"
    return detail


def cases(result: RoundtripResult) -> list[junit.Case]:
    """One case per row: every component, the padding slot, the free slots, the residents, slot reuse;
    then one passing case per launch-line hazard, marked as not gated."""
    out = []
    for row in result.components:
        message = ""
        if not row.ok:
            message = f"{row.mismatched_bytes} bytes differ; copies out/in {row.copies_out}/{row.copies_in}"
        out.append(junit.Case(row.name, junit.PASSED if row.ok else junit.FAILED, message=message))
    for h in result.hazards:
        note = " (not gated: a hazard of this launch line; the round trip tests the pool's copy path only)"
        out.append(junit.Case(h.code, junit.PASSED, details=f"{h.severity}: {h.message}{note}"))
    return out


def rows(result: RoundtripResult) -> list[github.Row]:
    """Step-summary rows, one per component row, same verdicts as JUnit; a hazard is a warning row."""
    return [
        github.Row(
            row.name,
            f"{row.mismatched_bytes:,} of {row.bytes:,} bytes differ",
            "0, one copy each way",
            junit.PASSED if row.ok else junit.FAILED,
        )
        for row in result.components
    ] + [github.Row(h.code, f"{h.severity} (not gated)", "no error", "warning") for h in result.hazards]


@record(frozen=True, repr=False)  # repr: the protocol's one line (what a failed assert shows)
class Report(Reportable):
    """A round trip as every reporter reads it (``kvdoctor.report.reportable``); MODEL as the user named it."""

    result: RoundtripResult
    model: str
    command = COMMAND
    suite = SUITE

    @property
    def title(self) -> str:
        return title(self.model)

    @property
    def exit_code(self) -> int:
        return self.result.exit_code

    @property
    def warnings(self) -> Sequence[str]:
        return warnings(self.result)

    @property
    def engine(self) -> EngineRef | None:
        return self.result.engine  # None: kvdoctor's own model (the header names it)

    @property
    def rules_revision(self) -> str | None:
        return self.result.rules_revision

    def body(self) -> dict[str, Any]:
        return self.result.body()

    def detail(self) -> str:
        return verdict_detail(self.result)

    def junit_cases(self) -> list[junit.Case]:
        return cases(self.result)

    def summary_rows(self) -> list[github.Row]:
        return rows(self.result)
