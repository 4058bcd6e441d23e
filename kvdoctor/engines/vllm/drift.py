"""``kvdoctor drift --server vllm``: kvdoctor's vLLM rule model against the installed vLLM, over a matrix.

Every bundled fixture the vLLM rule model accepts is analysed under every launch line of its matrix
(``kvdoctor.core.vllm.matrix``) and asked of the installed vLLM with the questions ``inspect --server vllm
--engine vllm`` asks (:func:`kvdoctor.engines.vllm.inspect.beside`: page bytes per layer, Mamba state
shapes and dtypes, the groups and their block sizes and bytes, the connector's HMA support and what the
offloading connector does per group, the start-up refusals), in one process that imports vLLM once.
Each question is one field; a cell drifts when any answer differs. Both sides refusing the launch alike
is agreement; one side refusing is drift, and the cell carries both messages. vLLM failing in a way it does not
refuse is the cell's ``error`` (its type, message and file:line), never drift: nothing was compared there.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kvdoctor._exceptions import EngineUnavailable, InputError
from kvdoctor.core.config import bundled_fixtures, load_config
from kvdoctor.core.drift_result import (
    CELL_DRIFT,
    CELL_ERROR,
    ArchitectureTotals,
    DriftReport,
    GeneratedDriftReport,
    ModelTypeVerdict,
    VllmCaseResult,
    VllmFieldDrift,
)
from kvdoctor.core.vllm import matrix
from kvdoctor.core.vllm.analysis import VllmAnalysis, analyze_vllm
from kvdoctor.core.vllm.connectors import Status
from kvdoctor.core.vllm.specs import classify
from kvdoctor.engines.vllm import _runtime as rt
from kvdoctor.engines.vllm import architectures
from kvdoctor.engines.vllm import inspect as asked

NOT_ASKED = "not asked (kvdoctor refused first)"


def _kvdoctor_refusal(a: VllmAnalysis) -> str | None:
    """What the rule model says vLLM refuses at start-up (KVD114) or when grouping, in vLLM's words."""
    said = [r.message for r in a.refusals]
    if a.refusal is not None:
        said.append(a.refusal)
    connector = a.connector.transfer.connector if a.connector.transfer else "the connector"
    said += [f"{connector}: {r.reason}" for r in a.connector.rows if r.status is Status.REFUSED][:1]
    return "; ".join(said) or None


def one_case(model: str, case: matrix.LaunchCase) -> VllmCaseResult:
    """MODEL under CASE: the rule model's answer and the installed vLLM's, field by field."""
    started = time.perf_counter()
    argv = case.argv

    def cell(
        fields: int, drift: list[VllmFieldDrift], ours: str | None, theirs: str | None, error: str | None = None
    ) -> VllmCaseResult:
        seconds = time.perf_counter() - started
        return VllmCaseResult(model, case.name, argv, fields, drift, ours, theirs, seconds, error)

    try:
        analysis = analyze_vllm(model, argv)
    except InputError as exc:  # the rule model refuses the line outright: vLLM is not asked (no specs to ask with)
        return cell(1, [VllmFieldDrift("refuses", str(exc), NOT_ASKED)], str(exc), None)
    try:
        answers = asked.beside(analysis)
    except EngineUnavailable:
        raise  # vLLM (or the connector's module) cannot be imported here: the whole run is exit 2
    except Exception as exc:  # vLLM failed in a way it does not refuse: this cell is an error, never drift
        return cell(0, [], _kvdoctor_refusal(analysis), None, asked.failure(exc))
    drift = [VllmFieldDrift(c.question, c.kvdoctor, c.vllm) for c in answers.drifts]
    theirs = "; ".join(answers.refusals) or None
    return cell(len(answers.checks), drift, _kvdoctor_refusal(analysis), theirs)


def cells(fixtures: Sequence[str], cases: Sequence[str]) -> list[tuple[str, matrix.LaunchCase]]:
    """The selected (fixture, launch case) pairs; exit 2 on an unknown name or a selection with no cell."""
    models = matrix.select_fixtures(fixtures)
    wanted = matrix.select(cases, matrix.case_names(), "vLLM launch case")
    chosen = []
    for model in models:
        own = matrix.cases_of(model)
        chosen += [(model, c) for c in own if c.name in wanted]
    if not chosen:  # e.g. a mamba cache mode asked of models without Mamba layers: a pass would check nothing
        raise InputError(
            f"--case {', '.join(cases)} applies to none of {', '.join(models)} "
            f"(the {matrix.MAMBA_MODE} cases run only on models with Mamba layers, the per-token-head KV "
            "cases only on models without MLA)"
        )
    return chosen


def run_drift(
    fixtures: Sequence[str] = (),
    cases: Sequence[str] = (),
    progress: Callable[[str, int, int], None] | None = None,
) -> DriftReport:
    """Every selected fixture under every selected launch line (all of both by default)."""
    started = time.perf_counter()
    chosen = cells(fixtures, cases)
    info = rt.engine_info("drift --server vllm")  # exit 2 with the install command when vLLM is not installed
    report = progress or (lambda what, done, total: None)
    results = []
    for model, case in chosen:
        report(f"{model} · {case.name}", len(results), len(chosen))
        results.append(one_case(model, case))
    report("done", len(chosen), len(chosen))
    return DriftReport(info, list(results), time.perf_counter() - started, None)


# The generated set's matrix: the cases taking distinct rule paths (prefix caching on/off, TP 2 with fp8 KV, the
# offloading connector), names every model's matrix has.
ARCHITECTURE_CASES = ("base", "no-prefix", "tp2+fp8", "offload+no-prefix")


def _fixture_model_types() -> set[str]:
    types = set()
    for path in bundled_fixtures().values():
        try:
            types.add(str(json.loads(path.read_text()).get("model_type")))
        except (OSError, ValueError, AttributeError):
            continue
    return types


def _case(name: str, mamba: bool) -> matrix.LaunchCase:
    return next(c for c in (*matrix.cases_for(mamba), *matrix.token_head_cases()) if c.name == name)


def run_all_architectures(
    cases: Sequence[str] = (),
    progress: Callable[[str, int, int], None] | None = None,
    *,
    output_dir: Path | None = None,
    model_types: Sequence[str] = (),
    strict: bool = False,
) -> GeneratedDriftReport:
    """Every model type vLLM's registry serves and kvdoctor's vLLM rules model, as a config from its class's
    defaults, under :data:`ARCHITECTURE_CASES` (or CASES, from the whole matrix). The configs go to a temporary
    directory kvdoctor removes, or to OUTPUT_DIR (kept). Zero generated configs is a refusal (exit 2)."""
    started = time.perf_counter()
    names = matrix.select(cases, matrix.case_names(), "vLLM launch case") if cases else list(ARCHITECTURE_CASES)
    info = rt.engine_info("drift --server vllm --all-architectures")
    report = progress or (lambda what, done, total: None)
    report("vLLM's model registry", 0, 1)
    tmp = Path(tempfile.mkdtemp(prefix="kvdoctor-vllm-architectures-")) if output_dir is None else None
    root = output_dir or tmp
    assert root is not None
    try:
        made = architectures.generate(root, model_types)
        if not made.generated:
            reasons = ", ".join(f"{why}: {n}" for why, n in made.skipped_by_reason.items()) or "no model types"
            raise EngineUnavailable(
                f"drift --server vllm --all-architectures generated no config from vLLM {info.version}'s registry "
                f"({made.model_types} model types; {reasons}): nothing to compare"
            )
        fixture_types = _fixture_model_types()
        planned = []
        for gen in made.generated:
            path = str(gen.directory / "config.json")
            mamba = _mamba(path, load_config)
            planned.append((gen, path, [_case(n, mamba) for n in names if mamba or "mamba-" not in n]))
        total = sum(len(c) for _, _, c in planned)
        results: list[VllmCaseResult] = []
        verdicts = []
        for gen, path, chosen in planned:
            cells = []
            for case in chosen:
                report(f"{gen.model_type} · {case.name}", len(results) + len(cells), total)
                done = one_case(path, case)
                cells.append(dataclasses.replace(done, model=gen.model_type))
            results.extend(cells)
            drifting = sum(c.status == CELL_DRIFT for c in cells)
            verdicts.append(
                ModelTypeVerdict(
                    gen.model_type,
                    gen.architecture,
                    gen.model_type in fixture_types,
                    len(cells),
                    drifting,
                    error_cells=sum(c.status == CELL_ERROR for c in cells),
                )
            )
        report("done", total, total)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    totals = ArchitectureTotals(
        registry_architectures=made.registry_architectures,
        model_types=made.model_types,
        generated=len(made.generated),
        skipped_by_reason=made.skipped_by_reason,
        skipped_model_types=dict(sorted(made.skipped.items())),
        per_model_type=verdicts,
        output_dir=str(output_dir) if output_dir is not None else None,
        strict=strict,
    )
    return GeneratedDriftReport(info, list(results), time.perf_counter() - started, None, totals)


def _mamba(path: str, load: Callable[[str], Any]) -> bool:
    """Whether the rule model gives PATH's config Mamba layers (the mamba cache-mode cases apply)."""
    try:
        return classify(load(path)) in matrix.MAMBA_FAMILIES
    except InputError:
        return False
