"""``kvdoctor sweep merge REPORT...``: the shards of one sweep (``--shard I/N`` on N machines, each its ``--json``)
joined into one report, as if one machine had run the whole plan.

The reports must be of one sweep: the same server, topology, models, scenarios, space, strength and plan (else
exit 2 naming the first difference); no cell may be in two of them. The coverage is computed again over every
cell that ran; the timings are the slowest shard's wall and the sum of every shard's cells and minimization.
Configurations no report holds are a warning (a shard not merged), never a silent gap.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvdoctor._exceptions import InputError
from kvdoctor.sweep import covering
from kvdoctor.sweep.cell import Verdict
from kvdoctor.sweep.report import COMMAND, from_body
from kvdoctor.sweep.result import SweepResult

__all__ = ["merge", "read"]

_SAME = ("server", "topology", "models", "scenarios", "strength", "space")


def read(path: Path) -> Mapping[str, Any]:
    """A sweep's ``--json`` report at PATH (exit 2 naming the file for anything else)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not a JSON report: {exc}") from None
    if not isinstance(doc, dict) or doc.get("command") != COMMAND or "cells" not in doc:
        raise InputError(f"{path}: not a kvdoctor sweep --json report (a run's, not a --plan's)")
    return doc


def _result(path: Path, doc: Mapping[str, Any]) -> SweepResult:
    """DOC read back as the result it was written from (exit 2 naming PATH when a part of it is missing or wrong)."""
    try:
        missing = next((key for key in _SAME if key not in doc), None)
        if missing is not None:
            raise KeyError(missing)
        return from_body(doc)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise InputError(f"{path}: not a whole kvdoctor sweep --json report ({type(exc).__name__}: {exc})") from None


def merge(reports: Sequence[tuple[Path, Mapping[str, Any]]]) -> SweepResult:
    """REPORTS (path, document) joined into one sweep."""
    if len(reports) < 2:
        raise InputError("kvdoctor sweep merge needs two reports or more")
    results = [_result(path, doc) for path, doc in reports]  # each one whole, before they are compared
    (first_path, first), *rest = reports
    plan = [c["values"] for c in first["plan"]["configurations"]]
    for path, doc in rest:
        for key in _SAME:
            if doc[key] != first[key]:
                raise InputError(f"{path}: not the sweep of {first_path}: its {key} differs")
        if [c["values"] for c in doc["plan"]["configurations"]] != plan:
            raise InputError(f"{path}: not the sweep of {first_path}: its plan differs")
    seen: dict[tuple[str, str, int], Path] = {}
    for (path, _), result in zip(reports, results, strict=True):
        for cell in result.cells:
            if cell.key in seen:
                raise InputError(f"{path}: cell {cell.label} ({cell.scenario}) is also in {seen[cell.key]}")
            seen[cell.key] = path
    base = results[0]
    cells = tuple(sorted((c for r in results for c in r.cells), key=lambda c: (c.index, c.model, c.scenario)))
    ran = [base.plan[c.index] for c in cells if c.verdict not in (Verdict.NOT_RUN, Verdict.REFUSED)]
    missing = sorted(set(range(len(base.plan))) - {c.index for c in cells})
    warnings = [w for r in results for w in r.warnings]
    if missing:
        warnings.append(f"{len(missing)} configurations of the plan are in no report (a shard not merged): {missing}")
    refused = tuple(dict.fromkeys(x for r in results for x in r.refused))
    return replace(
        base,
        shard=None,
        cells=cells,
        refused=refused,
        coverage=covering.coverage(base.space, dict.fromkeys(ran), base.strength),
        minimized=tuple(m for r in results for m in r.minimized),
        timings={
            "plan_s": max(r.timings.get("plan_s", 0.0) for r in results),
            "cells_s": round(sum(r.timings.get("cells_s", 0.0) for r in results), 1),
            "minimize_s": round(sum(r.timings.get("minimize_s", 0.0) for r in results), 1),
            "wall_s": max(r.timings.get("wall_s", 0.0) for r in results),
        },
        stopped_by_budget=any(r.stopped_by_budget for r in results),
        warnings=tuple(warnings),
        shards=tuple((str(p), r.shard) for (p, _), r in zip(reports, results, strict=True)),
    )
