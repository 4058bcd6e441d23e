"""A replay as the shared reports read it: the ``--json`` document (``kvdoctor schema replay``), one JUnit case per
bug, the step summary's rows, the exit code.

Exit codes, as every command's: 0 every chosen bug reproduced (its control green, its subject red or loud, each for
the right reason); 1 a bug not reproduced or not run here (a case not run is never counted as reproduced); 3 a
deployment failed where no replay expected it (before any verdict a gate could give); 2 bad input is refused before
this report exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvdoctor._exceptions import EXIT_DEPLOYMENT, EXIT_GATE, EXIT_PASS
from kvdoctor.core import bugs
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.core.replays import Replay, pending
from kvdoctor.replay.run import Matrix
from kvdoctor.replay.verdict import DEPLOYMENT_FAILED, BugVerdict
from kvdoctor.report import github, junit
from kvdoctor.report.reportable import Reportable

__all__ = ["COMMAND", "SUITE", "Report", "body", "exit_code", "replay_dict"]

COMMAND = "replay"
SUITE = "replay"
TITLE = "kvdoctor replay"


def exit_code(verdicts: Sequence[BugVerdict]) -> int:
    """3 when a deployment failed unexpectedly, else 1 when any bug is not reproduced (or not run), else 0."""
    if any(v.status == DEPLOYMENT_FAILED for v in verdicts):
        return EXIT_DEPLOYMENT
    return EXIT_PASS if verdicts and all(v.reproduced for v in verdicts) else EXIT_GATE


def replay_dict(r: Replay) -> dict[str, Any]:
    """A case as the JSON and ``--list`` name it."""
    bug = bugs.get(r.bug)
    return {
        "bug": r.bug,
        "title": bug.title,
        "url": bug.urls[0],
        "server": r.server,
        "model": r.model,
        "topology": r.topology,
        "scenario": r.scenario,
        "fault": r.fault,
        "target": r.target.value,
        "subject_args": list(r.subject_args),
        "control_args": list(r.control_args),
        "expect": {"outcome": r.expect.outcome.value, "components": list(r.expect.components), "line": r.expect.line},
        "proof_gate": r.proof,
        "command": r.command(),
        "control_command": r.command(control=True),
    }


def _bug(v: BugVerdict) -> dict[str, Any]:
    return {
        **replay_dict(v.replay),
        "status": v.status,
        "reason": v.reason,
        "control": v.control.to_dict(),
        "subject": v.subject.to_dict(),
        "first_divergence": v.first_divergence,
        "wall_s": v.subject.wall_s,
    }


def body(m: Matrix) -> dict[str, Any]:
    return {
        "count": len(m.verdicts),
        "reproduced": sum(v.reproduced for v in m.verdicts),
        "matrix": {
            "wall_s": round(m.wall_s, 3),
            "launches": m.launches,
            "separate": m.separate,
            "groups": [
                {
                    "deployment": g.key.label,
                    "cases": list(g.cases),
                    "launches": g.launches,
                    "wall_s": round(g.wall_s, 3),
                }
                for g in m.groups
            ],
        },
        "bugs": [_bug(v) for v in m.verdicts],
        "pending": [{"bug": r.bug, "fault": r.fault} for r in pending()],
    }


def _case(v: BugVerdict) -> junit.Case:
    status = {"reproduced": junit.PASSED, DEPLOYMENT_FAILED: junit.ERROR}.get(v.status, junit.FAILED)
    details = "\n".join(
        f"{s.role} ({s.case}): {s.verdict}: {s.reason}; exit {s.exit_code}; {s.summary}" for s in (v.control, v.subject)
    )
    message = "" if v.reproduced else f"{v.status}: {v.reason}"
    return junit.Case(v.replay.bug, status, message=message, details=details, time_s=v.subject.wall_s)


@dataclass(frozen=True, repr=False)  # repr: the protocol's one line (what a failed assert shows)
class Report(Reportable):
    """A replay as every reporter reads it (``kvdoctor.report.reportable``)."""

    matrix: Matrix
    command = COMMAND
    suite = SUITE
    title = TITLE
    engine: EngineRef | None = None
    rules_revision = None

    @property
    def exit_code(self) -> int:
        return exit_code(self.matrix.verdicts)

    @property
    def warnings(self) -> Sequence[str]:
        return ()

    def argv_fallback(self) -> Sequence[str]:
        return (COMMAND,)

    def body(self) -> dict[str, Any]:
        return body(self.matrix)

    def detail(self) -> str:
        m = self.matrix
        done = sum(v.reproduced for v in m.verdicts)
        head = f"{done}/{len(m.verdicts)} bugs reproduced on {m.launches} launches in {m.wall_s:.0f} s"
        missed = [v for v in m.verdicts if not v.reproduced]
        return f"{head}; {missed[0].replay.bug} {missed[0].status}: {missed[0].reason}" if missed else head

    def junit_cases(self) -> list[junit.Case]:
        return [_case(v) for v in self.matrix.verdicts]

    def summary_rows(self) -> list[github.Row]:
        rows = []
        for v in self.matrix.verdicts:
            status = "passed" if v.reproduced else ("error" if v.status == DEPLOYMENT_FAILED else "failed")
            rows.append(github.Row(v.replay.bug, f"{v.control.verdict} / {v.subject.verdict}", "green / red", status))
        return rows
