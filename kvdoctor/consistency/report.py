"""The consistency result as the shared reports: the ``--json`` document, JUnit cases, step-summary rows.

All read one :class:`ConsistencyResult`, so the JSON, the JUnit file, the summary and the verdict
line cannot disagree. The JSON opens with the shared header (``kvdoctor.report.envelope``); its
schema is ``kvdoctor schema consistency``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvdoctor.consistency.result import EXIT_GATE, EXIT_PASS, ConsistencyResult
from kvdoctor.report import github, junit
from kvdoctor.report.envelope import EngineRef, Verdict, document, header

COMMAND = "consistency"
TITLE = "kvdoctor consistency"


def engine_ref() -> EngineRef:
    """SGLang, as installed beside kvdoctor (its servers run in this interpreter's environment)."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution("sglang")
    except PackageNotFoundError:
        return EngineRef("sglang", None, None)
    return EngineRef("sglang", dist.version, str(Path(str(dist.locate_file("sglang")))))


def json_document(result: ConsistencyResult) -> dict[str, Any]:
    head = header(COMMAND, exit_code=result.exit_code, warnings=result.warnings, engine=engine_ref())
    return document(head, result)


def verdict(result: ConsistencyResult) -> Verdict:
    return Verdict.of(result.exit_code, warnings=len(result.warnings))


def cases(result: ConsistencyResult) -> list[junit.Case]:
    if result.exit_code not in (EXIT_PASS, EXIT_GATE):
        return [junit.Case("deployment", junit.ERROR, message=result.message, details=result.message)]
    out = [
        junit.Case(g.name, junit.PASSED if g.passed else junit.FAILED, message="" if g.passed else g.message)
        for g in result.gates
    ]
    for d in result.requests:
        if d.diverged and not d.within_noise:
            out.append(
                junit.Case(
                    f"request-{d.index}",
                    junit.FAILED,
                    message=f"diverges at token {d.position}: {d.ref_token} → {d.got_token}",
                )
            )
    return out


def rows(result: ConsistencyResult) -> list[github.Row]:
    if result.exit_code not in (EXIT_PASS, EXIT_GATE):
        return [github.Row("deployment", result.exit_reason, "up", "error")]
    return [github.Row(g.name, g.message, "", "passed" if g.passed else "failed") for g in result.gates]


def summary(result: ConsistencyResult) -> str:
    from kvdoctor.report.verdicts import summary as verdict_summary

    return verdict_summary(
        f"{TITLE} {result.model} ({result.topology}, {result.device})", verdict(result), rows(result)
    )
