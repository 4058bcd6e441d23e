"""``kvdoctor drift``: kvdoctor's frozen rules against the installed SGLang, over a matrix.

Every bundled fixture is inspected under every launch line of :data:`MATRIX`, by kvdoctor's rule
model and by the installed SGLang (:mod:`kvdoctor.engines.sglang.inspect`), in one process that
imports SGLang once. Against the SGLang version the rules restate, the table must be empty; against
a user's own SGLang it shows where the frozen rules no longer hold. SGLang failing in a way it does not
refuse is the cell's ``error`` (its type, message and file:line), never drift: nothing was compared there.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kvdoctor._exceptions import EngineUnavailable, InputError
from kvdoctor.core.config import bundled_fixtures
from kvdoctor.core.drift_result import (
    CELL_DRIFT,
    CELL_ERROR,
    ArchitectureTotals,
    DriftReport,
    GeneratedDriftReport,
    ModelTypeVerdict,
    SglangCaseResult,
)
from kvdoctor.core.sglang.analysis import analyze
from kvdoctor.engines import GpuArch
from kvdoctor.engines.sglang import _runtime, architectures
from kvdoctor.engines.sglang.inspect import Beside, _asked, beside, failure

SIZED = ("--max-total-tokens", "65536")  # a pool size both sides can use for the hicache ratio
DECODE = ("--disaggregation-mode", "decode")


@dataclass(frozen=True)
class LaunchCase:
    """One launch line of the matrix."""

    name: str
    argv: tuple[str, ...]


MATRIX: tuple[LaunchCase, ...] = (
    LaunchCase("colocated", ()),
    LaunchCase("prefill", ("--disaggregation-mode", "prefill")),
    LaunchCase("decode", DECODE),
    LaunchCase("decode+radix", (*DECODE, "--disaggregation-decode-enable-radix-cache")),
    LaunchCase("decode+cpu_tensor", (*DECODE, "--disaggregation-decode-retraction-backup", "cpu_tensor")),
    LaunchCase("decode+host_pool", (*DECODE, "--disaggregation-decode-retraction-backup", "host_pool")),
    LaunchCase("decode+none", (*DECODE, "--disaggregation-decode-retraction-backup", "none")),
    LaunchCase("decode+receive<1", (*DECODE, "--disaggregation-decode-host-receive-threshold", "0.5")),
    LaunchCase("decode+hicache", (*DECODE, "--enable-hierarchical-cache")),
    LaunchCase("decode+offload", (*DECODE, "--disaggregation-decode-enable-offload-kvcache")),
    LaunchCase(
        "decode+offload+storage",
        (*DECODE, "--disaggregation-decode-enable-offload-kvcache", "--hicache-storage-backend", "file"),
    ),
    LaunchCase("decode+priority", (*DECODE, "--enable-priority-scheduling")),
    LaunchCase("decode+fp8", (*DECODE, "--kv-cache-dtype", "fp8_e4m3")),
    LaunchCase(
        "decode+mxfp8+fa4",
        (*DECODE, "--kv-cache-dtype", "mxfp8", "--attention-backend", "fa4", "--page-size", "128"),
    ),
    LaunchCase("decode+tp2", (*DECODE, "--tp-size", "2")),
    LaunchCase("decode+no-hybrid-swa", (*DECODE, "--disable-hybrid-swa-memory")),
    LaunchCase("context-4096", ("--context-length", "4096")),
)


# ``--all-architectures``: the launch lines that take distinct rule paths (pools and components as served,
# PD decode's backup and state types, hybrid SWA off, a KV dtype), 4 of MATRIX's 17, so ~100 model types fit.
ARCHITECTURE_CASES: tuple[str, ...] = ("colocated", "decode", "decode+no-hybrid-swa", "decode+fp8")


def one_case(model: str, case: LaunchCase, arch: GpuArch, name: str | None = None) -> SglangCaseResult:
    """MODEL (a fixture or a config path) under CASE, reported as NAME (default: MODEL)."""
    started = time.perf_counter()
    label = name or model
    argv = [*case.argv, *SIZED]
    try:
        analysis = analyze(model, argv, platform=arch.platform())
        refusal = None
    except InputError as exc:
        analysis, refusal = None, str(exc)
    try:
        answers: Beside = beside(analysis, model, argv, arch, kvdoctor_refusal=refusal)
    except EngineUnavailable:
        raise  # this SGLang cannot be driven (import, version, a piece it lacks): drift refuses, exit 2
    except Exception as exc:  # SGLang failed in a way it does not refuse: this cell is an error, never drift
        different = _runtime.api_difference(exc, f"drift cell {model} · {case.name}")
        if different is not None:
            raise different from exc  # kvdoctor's call into another version failed: not drift, exit 2
        return SglangCaseResult(
            label,
            case.name,
            tuple(argv),
            0,
            [],
            refusal,
            None,
            time.perf_counter() - started,
            error=failure(exc),
        )
    live = answers.live
    return SglangCaseResult(
        model=label,
        case=case.name,
        argv=tuple(argv),
        fields=sum(_asked(n, live.skipped) for n in set(answers.ours) | set(live.fields)),
        drift=list(answers.drifts),
        kvdoctor_refusal=refusal,
        sglang_refusal=live.refusal.message if live.refusal else None,
        seconds=time.perf_counter() - started,
    )


def select(names: Sequence[str], known: Sequence[str], what: str) -> list[str]:
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InputError(f"unknown {what} {', '.join(unknown)}; choose from {', '.join(known)}")
    return list(names) or list(known)


def run_drift(
    fixtures: Sequence[str] = (),
    cases: Sequence[str] = (),
    arch: GpuArch = GpuArch.SM100,
    progress: Callable[[str, int, int], None] | None = None,
) -> DriftReport:
    """Every selected fixture under every selected launch line (all of both by default)."""
    started = time.perf_counter()
    models = select(fixtures, sorted(bundled_fixtures()), "fixture")
    by_name = {c.name: c for c in MATRIX}
    chosen = [by_name[n] for n in select(cases, list(by_name), "case")]
    info = _runtime.engine_info()
    report = progress or (lambda what, done, total: None)
    total = len(models) * len(chosen)
    results = []
    for model in models:
        for case in chosen:
            report(f"{model} · {case.name}", len(results), total)
            results.append(one_case(model, case, arch))
    report("done", total, total)
    return DriftReport(info, results, time.perf_counter() - started, arch.value)


def _fixture_model_types() -> set[str]:
    types = set()
    for path in bundled_fixtures().values():
        try:
            types.add(str(json.loads(path.read_text()).get("model_type")))
        except (OSError, ValueError, AttributeError):
            continue
    return types


def run_all_architectures(
    cases: Sequence[str] = (),
    arch: GpuArch = GpuArch.SM100,
    progress: Callable[[str, int, int], None] | None = None,
    *,
    output_dir: Path | None = None,
    model_types: Sequence[str] = (),
    strict: bool = False,
) -> GeneratedDriftReport:
    """Every model type SGLang's registry serves, as a config from its class's defaults, under the
    :data:`ARCHITECTURE_CASES` (or CASES). The configs go to a temporary directory kvdoctor removes, or
    to OUTPUT_DIR (kept). Zero generated configs is a refusal (exit 2), never a pass."""
    started = time.perf_counter()
    by_name = {c.name: c for c in MATRIX}
    chosen = (
        [by_name[n] for n in select(cases, list(by_name), "case")]
        if cases
        else [by_name[n] for n in ARCHITECTURE_CASES]
    )
    info = _runtime.engine_info()
    report = progress or (lambda what, done, total: None)
    report("SGLang's model registry", 0, 1)
    tmp = None
    if output_dir is None:
        tmp = Path(tempfile.mkdtemp(prefix="kvdoctor-architectures-"))
    root = output_dir or tmp
    assert root is not None
    try:
        made = architectures.generate(root, model_types)
        if not made.generated:
            reasons = ", ".join(f"{why}: {n}" for why, n in made.skipped_by_reason.items()) or "no model types"
            raise EngineUnavailable(
                f"drift --all-architectures generated no config from SGLang {info.version}'s registry "
                f"({made.model_types} model types; {reasons}): nothing to compare"
            )
        fixture_types = _fixture_model_types()
        total = len(made.generated) * len(chosen)
        results: list[SglangCaseResult] = []
        verdicts = []
        for gen in made.generated:
            cells = []
            for case in chosen:
                report(f"{gen.model_type} · {case.name}", len(results), total)
                cells.append(one_case(str(gen.directory / "config.json"), case, arch, gen.model_type))
            results.extend(cells)
            verdicts.append(
                ModelTypeVerdict(
                    gen.model_type,
                    gen.architecture,
                    gen.model_type in fixture_types,
                    len(cells),
                    sum(c.status == CELL_DRIFT for c in cells),
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
    return GeneratedDriftReport(info, list(results), time.perf_counter() - started, arch.value, totals)
