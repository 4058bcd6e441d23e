"""``kvdoctor drift --server vllm``: kvdoctor's vLLM rule model against the installed vLLM, over a matrix.

Every bundled fixture the vLLM rule model accepts is analysed under every launch line of its matrix
(``kvdoctor.core.vllm.matrix``) and asked of the installed vLLM with the questions ``inspect --server vllm
--engine vllm`` asks (:func:`kvdoctor.engines.vllm.inspect.beside`: page bytes per layer, Mamba state
shapes and dtypes, the groups and their block sizes and bytes, the connector's HMA support and what the
offloading connector does per group, the start-up refusals), in one process that imports vLLM once.
Each question is one field; a cell drifts when any answer differs. Both sides refusing the launch alike
is agreement; one side refusing is drift, and the cell carries both messages.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from kvdoctor._exceptions import EngineUnavailable, InputError
from kvdoctor.core.drift_result import DriftReport, VllmCaseResult, VllmFieldDrift
from kvdoctor.core.vllm import matrix
from kvdoctor.core.vllm.analysis import VllmAnalysis, analyze_vllm
from kvdoctor.core.vllm.connectors import Status
from kvdoctor.engines.vllm import _runtime as rt
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


def _frame(exc: BaseException) -> str:
    """The innermost frame inside vLLM (or kvdoctor) that raised, as file:line."""
    tb, where = exc.__traceback__, "?"
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename
        if "/vllm/" in path or "/kvdoctor/" in path:
            where = f"{path.split('/site-packages/')[-1]}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where


def one_case(model: str, case: matrix.LaunchCase) -> VllmCaseResult:
    """MODEL under CASE: the rule model's answer and the installed vLLM's, field by field."""
    started = time.perf_counter()
    argv = case.argv

    def cell(fields: int, drift: list[VllmFieldDrift], ours: str | None, theirs: str | None) -> VllmCaseResult:
        return VllmCaseResult(model, case.name, argv, fields, drift, ours, theirs, time.perf_counter() - started)

    try:
        analysis = analyze_vllm(model, argv)
    except InputError as exc:  # the rule model refuses the line outright: vLLM is not asked (no specs to ask with)
        return cell(1, [VllmFieldDrift("refuses", str(exc), NOT_ASKED)], str(exc), None)
    try:
        answers = asked.beside(analysis)
    except EngineUnavailable:
        raise  # vLLM (or the connector's module) cannot be imported here: the whole run is exit 2
    except Exception as exc:  # vLLM failed in a way it does not refuse: a finding for this cell only
        error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]} ({_frame(exc)})"
        return cell(0, [VllmFieldDrift("error", None, error)], _kvdoctor_refusal(analysis), None)
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
