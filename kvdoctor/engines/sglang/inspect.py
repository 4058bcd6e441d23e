"""``inspect --engine sglang``: the installed SGLang answers every field ``inspect`` reports.

For one model and launch line SGLang's own code is evaluated, in this process, on CPU:

- the launch line through ``prepare_server_args`` and the resolution pipeline (its overrides, and its
  refusals: a refusal is SGLang's answer, carried with its message and file:line, not a crash);
- ``ModelConfig`` and ``uses_ssm_state``;
- the pools its ``KVCacheConfigurator._init_pools`` builds, at a tiny size (their classes, buffer
  dtypes and per-layer shapes are what is read; a real server only makes them longer);
- ``resolve_decode_retraction_backup`` and the hicache ratio it resolves, against a pool that
  reports kvdoctor's pool size (the ratio depends on it, and a tiny pool would skew it);
- ``setup_state_kv_args`` (the PD state types it registers);
- the checks ``create_unified_radix_cache`` and ``validate_decode_radix_cache`` make before a tree
  cache is built (run up to the first line after the checks, then stopped).

:func:`compare` puts kvdoctor's rule-model answer beside each live one; every disagreement is a
``KVD015-RULES-DRIFT`` hazard naming the field, both answers and the SGLang version. SGLang's own code failing
in a way it does not refuse is no answer and no drift: exit 3, one line naming its error and SGLang's file:line
(:func:`server_failures`; ``drift`` makes it that cell's error, :func:`failure`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
from dataclasses import dataclass, field
from typing import Any

from kvdoctor._exceptions import DeploymentError, EngineRefuses, InputError
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.core.registry import ERROR, Hazard
from kvdoctor.core.sglang.analysis import Analysis, analyze
from kvdoctor.core.sglang.inspect_result import (
    FieldDrift,
    InspectBesideReport,
    LiveRefusal,
    ModelSource,
    RefusedInspectReport,
    SglangAnswers,
    inspect_report,
    shown,
)
from kvdoctor.engines import GpuArch, Inspected, InspectQuestion, failures
from kvdoctor.engines.sglang import _pools, _runtime, _support
from kvdoctor.engines.sglang._planes import planes_of

DRIFT_CODE = "KVD015-RULES-DRIFT"
REFUSES_CODE = "KVD014-SGLANG-REFUSES"  # the rule model's own code for a launch SGLang refuses
TINY = _pools.PoolPlan(rows=2, pages=4, page_size=1)


def failure(exc: BaseException) -> str:
    """SGLang's failure in words: its type, message and where it was raised (``sglang/<file>:<line> in <fn>``)."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]} at {_runtime.sglang_frame(exc)}"


def failed_inside(exc: BaseException, during: str) -> DeploymentError | None:
    """EXC as exit 3 when SGLang's own code raised it (no answer came: not drift, not kvdoctor's bug); None for
    kvdoctor's own errors and for a failure no frame of SGLang's raised (kvdoctor's bug, exit 4)."""
    return failures.failed_inside(exc, during, title="SGLang", raised_in=_runtime.raised_in_sglang, failure=failure)


def server_failures(during: str) -> contextlib.AbstractContextManager[None]:
    """Inside the block, an exception SGLang's own code raised ends the run with exit 3 (:func:`failed_inside`)."""
    return failures.server_failures(lambda exc: failed_inside(exc, during))


@dataclass
class LiveAnswers:
    """What the installed SGLang says, field by field (None: SGLang was not asked, see ``skipped``)."""

    info: EngineRef
    stubs: list[str]
    refusal: LiveRefusal | None = None  # stage: "start-up" (argument resolution), "pools", "tree cache"
    fields: dict[str, Any] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # field -> why it was not evaluated


# ---- what the rule model says, in the same vocabulary --------------------------------------------
def _held(pool: str | None, geometry: Any, layout: Any) -> str | None:
    """The sub-pool as SGLang's side reports it (``_holds_layers``): one an SWAKVPool builds without layers (Laguna's
    window without a sliding layer, an MTP draft whose one layer slides) holds no state, so none."""
    if layout.kv_pool == "SWAKVPool" and (geometry is None or not geometry.layers):
        return None
    return pool


def rule_answers(analysis: Analysis | None, refusal: str | None) -> dict[str, Any]:
    """kvdoctor's answers for the fields SGLang is asked about (refusal only when it refuses)."""
    if analysis is None:
        return {"refuses": True}
    layout, spec, cls = analysis.layout, analysis.spec, analysis.classification
    out: dict[str, Any] = {
        "refuses": refusal is not None or any(h.code.startswith("KVD014") for h in analysis.hazards),
        "uses_ssm_state": cls.uses_ssm_state,
        "is_hybrid_swa": cls.is_hybrid_swa,
        "kv_pool": layout.kv_pool,
        "full_pool": _held(layout.full_pool, spec.full, layout),
        "swa_pool": _held(layout.swa_pool, spec.swa, layout),
        "req_to_token_pool": layout.req_to_token_pool,
        "mamba_pool": layout.mamba_pool,
        "cpu_copy_carries_mamba": layout.cpu_copy_carries_mamba,
        "page_size": analysis.flags.page_size,
        "pd_state_types": list(analysis.pd_state_types),
    }
    kv_payloads = {
        c.name
        for c in spec.components
        if c.sub_pool in ("full", "swa") and not c.name.endswith("_scales") and c.dtype == spec.kv_dtype.payload
    }
    for comp in spec.components:
        # A KV payload is compared as the buffer SGLang allocates (plain fp8 is stored as uint8).
        dtype = spec.kv_dtype.store_dtype if comp.name in kv_payloads else comp.dtype
        if comp.name == "mla_kv" and dtype.startswith("float8"):
            dtype = "uint8"  # MLATokenToKVPool stores any fp8 latent row as uint8 (no MXFP8 MLA pool: KVD007)
        out[f"{comp.name}.dtype"] = dtype.split(" ")[0]
        out[f"{comp.name}.layers"] = comp.layers
        out[f"{comp.name}.shapes"] = [list(s) for s in comp.shapes]
    if analysis.flags.is_decode:
        out["retraction_backup"] = analysis.backup.backend
        out["hicache_ratio"] = analysis.backup.hicache_ratio
    return out


# ---- what SGLang says -----------------------------------------------------------------------------
class _ChecksPassed(Exception):
    """Raised on the first line after SGLang's tree-cache checks: they all passed."""


class _StopAfterChecks:
    def __getattr__(self, name: str) -> Any:
        raise _ChecksPassed


def _create_unified_radix_cache(registry: Any, build: Any, version: str) -> None:
    """SGLang's ``create_unified_radix_cache(ctx)``; SGLang 0.5.20 names it ``_create_unified_radix_cache(ctx,
    server_args, params)`` (the same checks before the same tree). ``_support.Missing`` when neither is there."""
    public = getattr(registry, "create_unified_radix_cache", None)
    if public is not None:
        public(build)
        return
    _support.piece(registry, "_create_unified_radix_cache", version)(build, build.server_args, build.params)


def _tree_cache_refusal(
    runtime: _runtime.Runtime, pools: _pools.EnginePools, ssm: bool, skipped: dict[str, str]
) -> str | None:
    """Run the checks ``create_unified_radix_cache`` makes before it builds the tree (and only them).

    A check this SGLang has no callable for is not run: ``refuses`` is then not asked (SKIPPED says why)
    unless SGLang refused anyway, because a launch that passes the checks that ran may fail the one that
    did not."""
    registry = _runtime.import_sglang("sglang.srt.mem_cache.registry")
    builder = _runtime.import_sglang("sglang.srt.mem_cache.kv_cache_builder")
    ctx = _runtime.import_sglang("sglang.srt.runtime_context")
    version = runtime.info.version
    swa = bool(runtime.model_config.is_hybrid_swa)
    full_tokens = _pools.full_tokens_per_layer(pools) if swa else None
    build = types.SimpleNamespace(
        server_args=runtime.server_args,
        params=_StopAfterChecks(),
        is_hybrid_ssm=ssm,
        is_hybrid_swa=swa,
        full_tokens_per_layer=full_tokens,
    )
    try:
        with _runtime.quiet():
            if ctx.get_disagg().disaggregation_decode_enable_radix_cache:
                try:
                    validate = _support.piece(builder, "validate_decode_radix_cache", version)
                except _support.Missing as exc:
                    skipped["refuses"] = f"decode radix-cache check {exc.not_available}"
                else:
                    validate(
                        model_config=runtime.model_config,
                        token_to_kv_pool=pools.kv_pool,
                        is_hybrid_swa=swa,
                        enable_hierarchical_cache=ctx.get_memory().enable_hierarchical_cache,
                    )
            _create_unified_radix_cache(registry, build, version)
    except _ChecksPassed:
        pass
    except _support.Missing as exc:
        skipped["refuses"] = f"tree-cache checks {exc.not_available}"
        return None
    except ValueError as exc:
        return _runtime._refusal(exc, "refuses to build its tree cache").args[0]
    if ctx.get_disagg().disaggregation_decode_retraction_backup != "host_pool":
        return None
    try:
        with _runtime.quiet():
            _host_capacity_check(pools, ssm, swa)
    except ValueError as exc:
        return _runtime._refusal(exc, "refuses to build its tree cache").args[0]
    return None


def _host_capacity_check(pools: _pools.EnginePools, ssm: bool, swa: bool) -> None:
    """``UnifiedRadixCache.validate_retraction_host_capacity`` (run after the tree is built), on a tree
    whose HiCache host stack is attached with a KV (and, for hybrid SWA, an SWA) host pool, as
    ``--disaggregation-decode-retraction-backup host_pool`` requires; what it checks is the KV pool's class."""
    urc = _runtime.import_sglang("sglang.srt.mem_cache.unified_radix_cache")
    names = _runtime.import_sglang("sglang.srt.mem_cache.hicache_storage").PoolName
    tree = types.SimpleNamespace(
        cache_controller=object(),
        host_pool_group=types.SimpleNamespace(entry_map={names.KV: None, **({names.SWA: None} if swa else {})}),
        token_to_kv_pool_allocator=pools.allocator,
        sidecar_pool_specs=[],
        supports_mamba=lambda: ssm,
        supports_swa=lambda: swa,
    )
    tree.supports_retraction_backup = types.MethodType(urc.UnifiedRadixCache.supports_retraction_backup, tree)
    urc.UnifiedRadixCache.validate_retraction_host_capacity(tree)


def _pd_state_types(pools: _pools.EnginePools) -> list[str]:
    utils = _runtime.import_sglang("sglang.srt.disaggregation.utils")
    kv_args = types.SimpleNamespace()
    with _runtime.quiet():
        utils.setup_state_kv_args(kv_args, pools.kv_pool, req_to_token_pool=pools.req_to_token_pool)
    return [t.name for t in kv_args.state_types]


def _class_names(obj: Any) -> list[str]:
    return [c.__name__ for c in type(obj).__mro__]


def _component_fields(pools: _pools.EnginePools) -> dict[str, Any]:
    out: dict[str, Any] = {}
    by_component: dict[str, list[Any]] = {}
    for plane in planes_of(pools):
        by_component.setdefault(plane.component, []).append(plane)
    for name, planes in by_component.items():
        first = planes[0].buffers[0]
        out[f"{name}.dtype"] = str(first.dtype).removeprefix("torch.")
        out[f"{name}.layers"] = len(planes[0].buffers)
        if name.endswith("_scales"):
            out[f"{name}.shapes"] = [[p.buffers[0].shape[1], p.buffers[0].shape[-1]] for p in planes]
        else:
            out[f"{name}.shapes"] = [list(p.buffers[0].shape[1:]) for p in planes]
    return out


def ask(model: str, server_argv: list[str], arch: GpuArch, pool_tokens: int | None) -> LiveAnswers:
    """Evaluate the installed SGLang on MODEL and SERVER_ARGV (one resolution, tiny pools)."""
    try:
        runtime = _runtime.resolve(model, server_argv, arch)
    except EngineRefuses as exc:
        info = _runtime.engine_info()
        return LiveAnswers(info, [], refusal=LiveRefusal("start-up", str(exc)), fields={"refuses": True})
    try:
        return _ask(runtime, pool_tokens)
    except Exception as exc:
        different = _runtime.api_difference(exc, "inspect's call into it failed")
        if different is not None:
            raise different from exc  # another version's API, not an answer and not a kvdoctor bug: exit 2
        raise
    finally:
        runtime.close()


def _ask(runtime: _runtime.Runtime, pool_tokens: int | None) -> LiveAnswers:
    ctx = _runtime.import_sglang("sglang.srt.runtime_context")
    builder = _runtime.import_sglang("sglang.srt.mem_cache.kv_cache_builder")
    live = LiveAnswers(runtime.info, list(runtime.stubs))
    page = int(ctx.get_schedule().page_size)
    plan = _pools.PoolPlan(
        rows=TINY.rows,
        pages=TINY.pages * max(1, 4096 // page // 4 or 1),
        page_size=page,
        mamba_slots_per_request=_pools.mamba_slots_per_request(runtime),
    )
    try:
        pools = _pools.build(runtime, plan, "cpu")
    except EngineRefuses as exc:
        live.refusal = LiveRefusal("pools", str(exc))
        live.fields["refuses"] = True
        return live
    ssm = bool(builder.uses_ssm_state(runtime.model_config))
    mamba = pools.mamba_pool
    f = live.fields
    f["uses_ssm_state"] = ssm
    f["is_hybrid_swa"] = bool(runtime.model_config.is_hybrid_swa)
    f["kv_pool"] = _class_names(pools.kv_pool)
    subs = pools.sub_pools
    f["full_pool"] = _class_names(subs["full"]) if _holds_layers(subs.get("full")) else None
    f["swa_pool"] = _class_names(subs["swa"]) if _holds_layers(subs.get("swa")) else None
    f["req_to_token_pool"] = _class_names(pools.req_to_token_pool)
    f["mamba_pool"] = _class_names(mamba) if mamba is not None else None
    f["cpu_copy_carries_mamba"] = bool(pools.kv_pool.cpu_copy_carries_mamba)
    f["page_size"] = page
    f["pd_state_types"] = _pd_state_types(pools)
    if any(hasattr(p, "index_k_with_scale_buffer") for p in (pools.kv_pool, *subs.values())):
        live.skipped["dsa_index_k"] = "the DSA indexer key cache: kvdoctor's plane reader does not read it yet"
    try:
        f.update(_component_fields(pools))
    except EngineRefuses as exc:
        live.skipped["components"] = f"{type(pools.kv_pool).__name__}: buffers kvdoctor cannot read ({exc})"
    if ctx.get_disagg().disaggregation_mode == "decode":
        f["retraction_backup"], f["hicache_ratio"] = _pools.resolve_backup(runtime, pools, pool_tokens)
        if pool_tokens is None:
            live.skipped["hicache_ratio"] = "kvdoctor has no pool size for this launch (pass --max-total-tokens)"
    refusal = _tree_cache_refusal(runtime, pools, ssm, live.skipped)
    if refusal is not None:
        live.refusal = LiveRefusal("tree cache", refusal)
        live.skipped.pop("refuses", None)  # SGLang refused with the checks it has: that is its answer
    f["refuses"] = live.refusal is not None
    return live


def _holds_layers(pool: Any) -> bool:
    """A sub-pool with no layers (a pure-Mamba model's full pool) holds no state: reported as none."""
    return pool is not None and int(getattr(pool, "layer_num", 1) or 0) > 0


# ---- the comparison -------------------------------------------------------------------------------
def _agrees(name: str, ours: Any, theirs: Any) -> bool:
    if isinstance(theirs, list) and theirs and all(isinstance(c, str) for c in theirs) and name.endswith("pool"):
        return ours in theirs  # SGLang may build a subclass of the class kvdoctor names (isinstance holds)
    if name == "hicache_ratio" and isinstance(ours, (int, float)) and isinstance(theirs, (int, float)):
        return abs(float(ours) - float(theirs)) <= 1e-9 * max(1.0, abs(float(theirs)))
    return ours == theirs


def _asked(name: str, skipped: dict[str, str]) -> bool:
    """Whether SGLang was asked about NAME (a component field is skipped with its component)."""
    component = name.split(".")[0] if "." in name else None
    return name not in skipped and not (component and ("components" in skipped or component in skipped))


def compare(ours: dict[str, Any], live: LiveAnswers) -> list[FieldDrift]:
    """Every field both sides answered and where they differ (a refusal on either side ends the list)."""
    theirs = live.fields
    if not _asked("refuses", live.skipped) and not theirs.get("refuses"):
        if ours.get("refuses"):
            return []  # kvdoctor refuses; whether this SGLang would, its missing check cannot say
    elif ours.get("refuses") or theirs.get("refuses"):
        if bool(ours.get("refuses")) != bool(theirs.get("refuses")):
            return [FieldDrift("refuses", bool(ours.get("refuses")), bool(theirs.get("refuses")))]
        return []
    drifts = []
    for name in sorted(set(ours) | set(theirs)):
        if not _asked(name, live.skipped):
            continue
        mine, their = ours.get(name), theirs.get(name)
        if not _agrees(name, mine, their):
            drifts.append(FieldDrift(name, mine, shown(name, their)))
    return drifts


def drift_message(drift: FieldDrift, version: str | None) -> str:
    return f"{drift.field}: kvdoctor says {drift.kvdoctor!r}, SGLang {version} says {drift.sglang!r}"


@dataclass
class Beside:
    """kvdoctor's answers and the installed SGLang's, side by side, with every disagreement."""

    ours: dict[str, Any]
    live: LiveAnswers
    drifts: list[FieldDrift]
    kvdoctor_refusal: str | None = None

    def hazards(self) -> list[Hazard]:
        """One ``KVD015-RULES-DRIFT`` error hazard per disagreement (gated by ``--strict``, like any error),
        and the installed SGLang's own refusal as a ``KVD014-SGLANG-REFUSES`` error when the rule model
        did not already report one: a launch the installed server refuses never passes."""
        version = self.live.info.version
        found = [Hazard(ERROR, DRIFT_CODE, drift_message(d, version)) for d in self.drifts]
        refusal = self.live.refusal
        if refusal is not None and not self.ours.get("refuses"):
            found.append(
                Hazard(
                    ERROR,
                    REFUSES_CODE,
                    f"the installed SGLang {version} refuses this launch ({refusal.stage}): {refusal.message}",
                )
            )
        return found

    def refused_by_both(self) -> str | None:
        """SGLang's refusal when kvdoctor's rules refused the input too (then the input is malformed: exit 2)."""
        refusal = self.live.refusal
        if self.kvdoctor_refusal is None or refusal is None:
            return None
        return f"SGLang {self.live.info.version} refuses it too ({refusal.stage}): {refusal.message}"

    def rows(self) -> list[tuple[str, Any, Any, bool | None]]:
        """(field, kvdoctor, SGLang, agree) for every field either side answered; agree None: not asked."""
        drifted = {d.field for d in self.drifts}
        out = []
        skipped = self.live.skipped
        for name in sorted(set(self.ours) | set(self.live.fields)):
            asked = _asked(name, skipped)
            agree = name not in drifted if asked else None
            out.append((name, self.ours.get(name), shown(name, self.live.fields.get(name)), agree))
        return out

    def answers(self) -> SglangAnswers:
        """Both sides as ``inspect``'s typed result carries them (its ``--json`` key ``sglang``)."""
        live = self.live
        return SglangAnswers(
            engine=live.info,
            stubs=tuple(live.stubs),
            refusal=live.refusal,
            fields=dict(live.fields),
            skipped=dict(live.skipped),
            kvdoctor=dict(self.ours),
            kvdoctor_refusal=self.kvdoctor_refusal,
            drift=tuple(self.drifts),
            rules_version=_support.RULES_SGLANG_VERSION,
            differs_from_rules=live.info.version != _support.RULES_SGLANG_VERSION,
        )


def beside(
    analysis: Analysis | None, model: str, server_argv: list[str], arch: GpuArch, kvdoctor_refusal: str | None = None
) -> Beside:
    """Ask SGLang about MODEL and SERVER_ARGV and compare with ANALYSIS (None: kvdoctor refused).

    Both sides see one GPU: an ANALYSIS made for another platform than ARCH is made again for ARCH.
    """
    if analysis is not None and analysis.platform.gpu_arch != arch.platform().gpu_arch:
        try:
            analysis = analyze(model, server_argv, platform=arch.platform())
        except InputError as exc:
            analysis, kvdoctor_refusal = None, str(exc)
    tokens = None
    if analysis is not None:
        tokens = analysis.sizing.full_tokens or analysis.sizing.swa_tokens
    live = ask(model, server_argv, arch, tokens)
    ours = rule_answers(analysis, kvdoctor_refusal)
    return Beside(ours, live, compare(ours, live), kvdoctor_refusal)


def inspect_beside(question: InspectQuestion) -> Inspected:
    """kvdoctor's result, SGLang's live answers beside it, and a KVD015 hazard per disagreement.

    When the rule model refused the input (``question.analysis`` is None) SGLang may still answer, and the
    refusal is drift; when SGLang refuses it too, the input is malformed (exit 2), never a report that passes.
    """
    with server_failures("inspect --engine sglang"):
        return _inspect_beside(question)


def _inspect_beside(question: InspectQuestion) -> Inspected:
    model, argv, arch = question.model, list(question.server_argv), question.arch
    refusal = question.kvdoctor_refusal
    if question.analysis is None:
        answers = beside(None, model, argv, arch, kvdoctor_refusal=refusal)
        both = answers.refused_by_both()
        if both is not None:
            raise InputError(f"{refusal}; {both}") from None
        refused = RefusedInspectReport(
            model=ModelSource(model), hazards=tuple(answers.hazards()), sglang=answers.answers()
        )
        return Inspected(refused, answers.live.info, len(answers.drifts))
    analysis: Analysis = question.analysis
    answers = beside(analysis, model, argv, arch)
    base = inspect_report(analysis, question.request_tokens, question.concurrent)
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    fields["hazards"] = (*base.hazards, *answers.hazards())
    return Inspected(InspectBesideReport(**fields, sglang=answers.answers()), answers.live.info, len(answers.drifts))
