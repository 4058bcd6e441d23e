"""A sweep as the shared reports read it: the ``--json`` document (``kvdoctor schema sweep``), one JUnit case per
cell, the step summary's rows, the exit code; and the document read back (:func:`from_body`), which ``kvdoctor
sweep merge`` joins.

Exit codes: 0 every cell that ran is green (cells cut by ``--budget`` make it a warning); 1 a finding: a red, loud
or vacuous cell (a check with no teeth is never a pass); 3 no cell ran at all (every one refused or cut: nothing
was tested); 4 kvdoctor failed in a cell and nothing else was found; 2 bad input is refused before this exists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvdoctor._exceptions import EXIT_DEPLOYMENT, EXIT_GATE, EXIT_INTERNAL, EXIT_PASS
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.report import github, junit
from kvdoctor.report.reportable import Reportable
from kvdoctor.sweep.cell import Verdict
from kvdoctor.sweep.covering import Coverage
from kvdoctor.sweep.minimize import ReleaseRange
from kvdoctor.sweep.result import Cell, Minimized, Refusal, SweepResult
from kvdoctor.sweep.run import Sweeper
from kvdoctor.sweep.space import Configuration, Factor, Space

__all__ = ["COMMAND", "SUITE", "TITLE", "Report", "body", "exit_code", "from_body", "plan_body"]

COMMAND = "sweep"
SUITE = "sweep"
TITLE = "kvdoctor sweep"
_RAN = (Verdict.GREEN, Verdict.RED, Verdict.LOUD, Verdict.VACUOUS)


def exit_code(r: SweepResult) -> int:
    if any(c.verdict.finding for c in r.cells):
        return EXIT_GATE
    if any(c.verdict is Verdict.ERROR for c in r.cells):
        return EXIT_INTERNAL
    if not any(c.verdict in _RAN for c in r.cells):
        return EXIT_DEPLOYMENT
    return EXIT_PASS


def _factor(f: Factor) -> dict[str, Any]:
    return {
        "flag": f.flag,
        "values": list(f.values),
        "default": f.default,
        "why": f.why,
        "topology": f.topology,
        "shared": f.shared,
    }


def _cell(c: Cell) -> dict[str, Any]:
    return {
        "model": c.model,
        "scenario": c.scenario,
        "configuration": c.index,
        "label": c.label,
        "argv": list(c.argv),
        "verdict": c.verdict.value,
        "reason": c.reason,
        "summary": c.summary,
        "identical": c.identical,
        "total": c.total,
        "retractions": c.retractions,
        "first_divergence": c.first_divergence,
        "fault_fired": c.fault_fired,
        "run_dir": c.run_dir,
        "bundle": c.bundle,
        "wall_s": c.wall_s,
    }


def _minimized(m: Minimized) -> dict[str, Any]:
    span = m.releases
    return {
        "model": m.model,
        "scenario": m.scenario,
        "configuration": m.index,
        "runs": m.runs,
        "red": m.red,
        "rate": round(m.rate, 3),
        "deterministic": m.deterministic,
        "kept": list(m.kept) if m.kept is not None else None,
        "argv": list(m.argv),
        "words": m.words,
        "probes": [{"flags": list(flags), "verdict": v} for flags, v in m.probes],
        "releases": None
        if span is None
        else {
            "first_red": span.first_red,
            "red_in_oldest": span.red_in_oldest,
            "tried": [{"release": rel, "red": red} for rel, red in span.tried],
        },
        "release_words": m.release_words,
        "bundle": m.bundle,
        "note": m.note,
        "wall_s": m.wall_s,
        "baseline": m.baseline,
        "cause": m.cause,
    }


def _head(
    server: str,
    topology: str,
    models: Sequence[str],
    scenarios: Sequence[str],
    strength: int,
    space: Space,
    plan: Sequence[Configuration],
    shard: str | None,
) -> dict[str, Any]:
    return {
        "server": server,
        "topology": topology,
        "models": list(models),
        "scenarios": list(scenarios),
        "strength": strength,
        "space": {"source": space.source, "factors": [_factor(f) for f in space.factors]},
        "plan": {
            "shard": shard,
            "configurations": [
                {"index": i, "label": c.label(space), "argv": list(c.argv(space)), "values": dict(c.values)}
                for i, c in enumerate(plan)
            ],
        },
    }


def plan_body(sweeper: Sweeper) -> dict[str, Any]:
    """``--plan --json``: the space (what is left after the refusals), the refusals and the whole plan."""
    o = sweeper.o
    assert sweeper.space is not None
    head = _head(o.server, o.topology, o.models, sweeper.scenarios, o.strength, sweeper.space, sweeper.plan(), o.shard)
    return {**head, "refused": [{"what": x.what, "reason": x.reason} for x in sweeper.refused]}


def body(r: SweepResult) -> dict[str, Any]:
    return {
        **_head(r.server, r.topology, r.models, r.scenarios, r.strength, r.space, r.plan, r.shard),
        "counts": {v.value: r.count(v) for v in Verdict},
        "cells": [_cell(c) for c in r.cells],
        "refused": [{"what": x.what, "reason": x.reason} for x in r.refused],
        "coverage": {
            "strength": r.coverage.strength,
            "covered": r.coverage.covered,
            "total": r.coverage.total,
            "fraction": round(r.coverage.fraction, 4),
        },
        "minimized": [_minimized(m) for m in r.minimized],
        "releases": list(r.releases),
        "timings": dict(r.timings),
        "budget_s": r.budget_s,
        "stopped_by_budget": r.stopped_by_budget,
        "inject": r.inject,
        "fault_file": r.fault_file,
        "output_dir": r.output_dir,
        **({"shards": [{"path": path, "shard": shard} for path, shard in r.shards]} if r.shards else {}),
    }


def from_body(doc: Mapping[str, Any], warnings: Sequence[str] = ()) -> SweepResult:
    """A sweep's ``--json`` document (its body keys) as the result it was written from."""
    space = Space(
        doc["server"],
        tuple(
            Factor(f["flag"], tuple(f["values"]), f["default"], f["why"], f["topology"], f["shared"])
            for f in doc["space"]["factors"]
        ),
        doc["space"]["source"],
    )
    plan = tuple(Configuration(tuple(c["values"].items())) for c in doc["plan"]["configurations"])
    cells = tuple(
        Cell(
            c["model"],
            c["scenario"],
            c["configuration"],
            c["label"],
            tuple(c["argv"]),
            Verdict(c["verdict"]),
            c["reason"],
            c["summary"],
            c["identical"],
            c["total"],
            c["retractions"],
            c["first_divergence"],
            c["fault_fired"],
            c["run_dir"],
            c["bundle"],
            c["wall_s"],
        )
        for c in doc["cells"]
    )
    minimized = tuple(
        Minimized(
            m["model"],
            m["scenario"],
            m["configuration"],
            m["runs"],
            m["red"],
            tuple(m["kept"]) if m["kept"] is not None else None,
            tuple(m["argv"]),
            tuple((tuple(p["flags"]), p["verdict"]) for p in m["probes"]),
            None
            if m["releases"] is None
            else ReleaseRange(
                m["releases"]["first_red"],
                m["releases"]["red_in_oldest"],
                tuple((t["release"], t["red"]) for t in m["releases"]["tried"]),
            ),
            m["release_words"],
            m["bundle"],
            m["note"],
            m["wall_s"],
            m["baseline"],
            m["cause"],
        )
        for m in doc["minimized"]
    )
    cov = doc["coverage"]
    return SweepResult(
        server=doc["server"],
        topology=doc["topology"],
        models=tuple(doc["models"]),
        scenarios=tuple(doc["scenarios"]),
        space=space,
        strength=doc["strength"],
        plan=plan,
        shard=doc["plan"]["shard"],
        cells=cells,
        refused=tuple(Refusal(x["what"], x["reason"]) for x in doc["refused"]),
        coverage=Coverage(cov["strength"], cov["covered"], cov["total"]),
        minimized=minimized,
        timings=dict(doc["timings"]),
        budget_s=doc["budget_s"],
        stopped_by_budget=doc["stopped_by_budget"],
        inject=doc["inject"],
        fault_file=doc["fault_file"],
        output_dir=doc["output_dir"],
        releases=tuple(doc["releases"]),
        warnings=tuple(warnings),
        shards=tuple((x["path"], x["shard"]) for x in doc.get("shards", ())),
    )


_JUNIT = {  # a cell's JUnit status, and its step-summary status (the same words)
    Verdict.GREEN: junit.PASSED,
    Verdict.RED: junit.FAILED,
    Verdict.LOUD: junit.FAILED,
    Verdict.VACUOUS: junit.FAILED,
    Verdict.REFUSED: junit.SKIPPED,
    Verdict.NOT_RUN: junit.SKIPPED,
    Verdict.ERROR: junit.ERROR,
}


def cell_name(c: Cell) -> str:
    return f"{c.model} · {c.scenario} · {c.label}"


@dataclass(frozen=True, repr=False)
class Report(Reportable):
    """A sweep as every reporter reads it (``kvdoctor.report.reportable``)."""

    result: SweepResult
    command = COMMAND
    suite = SUITE
    title = TITLE
    engine: EngineRef | None = None
    rules_revision = None

    @property
    def exit_code(self) -> int:
        return exit_code(self.result)

    @property
    def warnings(self) -> Sequence[str]:
        return self.result.warnings

    def body(self) -> dict[str, Any]:
        return body(self.result)

    def detail(self) -> str:
        r = self.result
        counts = ", ".join(f"{r.count(v)} {v.value}" for v in Verdict if r.count(v))
        cov = r.coverage
        head = (
            f"{len(r.cells)} cells ({counts}); {cov.covered}/{cov.total} {cov.strength}-tuples covered in "
            f"{r.timings.get('wall_s', 0):.0f} s"
        )
        found = [m for m in r.minimized if m.kept is not None]
        return f"{head}; {found[0].words} ({found[0].release_words})" if found else head

    def junit_cases(self) -> list[junit.Case]:
        out = []
        for c in self.result.cells:
            m = self.result.minimized_for(c)
            details = "\n".join(
                x for x in (c.summary, c.run_dir and f"run: {c.run_dir}", m and f"{m.words}; {m.release_words}") if x
            )
            message = "" if c.verdict is Verdict.GREEN else f"{c.verdict.value}: {c.reason}"
            out.append(junit.Case(cell_name(c), _JUNIT[c.verdict], message=message, details=details, time_s=c.wall_s))
        return out

    def summary_rows(self) -> list[github.Row]:
        rows = []
        for c in self.result.cells:
            m = self.result.minimized_for(c)
            value = c.verdict.value + (f": {m.words}" if m is not None else "")
            rows.append(github.Row(cell_name(c), value, "green", _JUNIT[c.verdict]))
        return rows
