"""Hazards: rules over the spec, the policy and the flags that a person can act on.

Each hazard has a stable code (CI greps for it), a severity (``--strict`` fails on "error"), and a
sentence that says what goes wrong and what to change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from kvdoctor.core.sglang import rules
from kvdoctor.core.sglang.flags import ServerFlags
from kvdoctor.core.sglang.policy import (
    DEFAULT_PLATFORM,
    BackupDecision,
    Platform,
    PoolLayout,
    backup_carries,
    pd_state_types,
)
from kvdoctor.core.sglang.sizing import Sizing
from kvdoctor.core.sglang.spec import StateSpec
from kvdoctor.core.validate import Refusal

ERROR, WARNING, INFO = "error", "warning", "info"


@dataclass(frozen=True)
class Hazard:
    severity: str
    code: str
    message: str
    where: str | None = None  # the SGLang file:lines the rule restates (KVD014: where SGLang refuses)


@dataclass(frozen=True)
class RefusalFacts:
    """A refusal the server itself would raise (SGLang at start-up, vLLM while planning its KV cache):
    its message and the server's file:lines raising it, as ``inspect`` reports it (``refusals``,
    ``refusal``) for either server."""

    message: str
    where: str


@dataclass(frozen=True)
class Context:
    """Everything a hazard rule may look at."""

    spec: StateSpec
    layout: PoolLayout
    backup: BackupDecision
    flags: ServerFlags
    sizing: Sizing
    refusals: tuple[Refusal, ...] = ()
    platform: Platform = DEFAULT_PLATFORM


def _lost_components(ctx: Context) -> list[str]:
    if not ctx.backup.applies:
        return []
    carried = backup_carries(ctx.backup.backend, ctx.spec, ctx.layout, ctx.flags.page_size)
    return [name for name in ctx.spec.names if name not in carried]


def ssm_on_host_pool(ctx: Context) -> Iterator[Hazard]:
    if ctx.backup.applies and ctx.backup.backend == "host_pool" and ctx.spec.recurrent is not None:
        fix = {
            "flag": "Drop --disaggregation-decode-retraction-backup host_pool (SGLang then picks cpu_tensor).",
            "host-receive threshold": "Keep --disaggregation-decode-host-receive-threshold at 1: below 1 it "
            "declares host_pool retraction.",
        }.get(ctx.backup.source, "")
        refused = rules.REFUSALS["host_pool_mamba"].source
        yield Hazard(
            ERROR,
            "KVD001-SSM-ON-HOST-POOL",
            f"recurrent state (conv/SSM) on the host_pool retraction backup. SGLang 0.5.23 refuses this "
            f"launch at start-up (KVD014, {refused.where}); a server without that check (an SGLang "
            "build or fork whose tree cache does not refuse Mamba models) starts, and since the host "
            "pool has no recurrent-state sidecar, every retracted request then silently resumes on "
            f"another request's state. {fix}",
            refused.where,
        )


def sglang_refuses(ctx: Context) -> Iterator[Hazard]:
    for refusal in ctx.refusals:
        yield Hazard(
            ERROR,
            "KVD014-SGLANG-REFUSES",
            f'SGLang 0.5.23 refuses this launch at start-up: "{refusal.message}" ({refusal.where})',
            refusal.where,
        )


def block_scales_dropped(ctx: Context) -> Iterator[Hazard]:
    lost = [n for n in _lost_components(ctx) if n.endswith("_scales")]
    if lost:
        yield Hazard(
            ERROR,
            "KVD002-BLOCK-SCALES-DROPPED",
            f"--kv-cache-dtype {ctx.spec.kv_dtype.flag} keeps per-block scales ({', '.join(lost)}) that the "
            f"{ctx.backup.backend} retraction path does not copy: restored KV decodes with stale scales. "
            "Use a path that carries them (mxfp8 at --page-size 128, cpu_tensor for mxfp8) or an "
            "unscaled KV dtype (fp8_e4m3, bf16).",
            rules.located(
                rules.HOST_POOL_SCALES_SOURCE if ctx.backup.backend == "host_pool" else rules.CPU_COPY_SCALES_SOURCE
            ),
        )


def other_state_lost(ctx: Context) -> Iterator[Hazard]:
    if ctx.backup.backend == "host_pool":
        return  # reported by KVD001 with its own advice
    lost = [n for n in _lost_components(ctx) if not n.endswith("_scales")]
    if ctx.backup.applies and ctx.backup.backend == "none":
        yield Hazard(
            WARNING,
            "KVD003-NO-RETRACTION-BACKUP",
            "--disaggregation-decode-retraction-backup none keeps no backup: every retracted request is "
            "aborted with HTTP 503 instead of resumed.",
            rules.located(rules.RETRACTION_BACKUPS_SOURCE),
        )
    elif lost:
        yield Hazard(
            ERROR,
            "KVD004-STATE-NOT-BACKED-UP",
            f"the {ctx.backup.backend} retraction backup leaves {', '.join(lost)} behind on a slot "
            "that another request will reuse.",
            rules.located((rules.CARRIES_MAMBA_SOURCE, rules.MAMBA_BACKUP_SOURCE)),
        )


def mxfp8_alignment(ctx: Context) -> Iterator[Hazard]:
    if ctx.spec.kv_dtype.flag != "mxfp8":
        return
    dims = {g.head_dim for g in (ctx.spec.full, ctx.spec.swa) if g is not None and not g.mla}
    dims |= {g.v_head_dim for g in (ctx.spec.full, ctx.spec.swa) if g is not None and not g.mla}
    bad = sorted(d for d in dims if d % rules.MXFP8_ALIGNMENT)
    if bad:
        yield Hazard(
            ERROR,
            "KVD005-MXFP8-HEAD-DIM",
            f"MXFP8 scales cover 32 elements of head_dim, but head_dim {bad} is not a multiple of 32: "
            "SGLang refuses to build the pool.",
            rules.located(rules.MXFP8_POOL_SOURCE),
        )
    interleaved = ctx.flags.page_size == rules.MXFP8_INTERLEAVED_PAGE
    if not interleaved:
        yield Hazard(
            ERROR,
            "KVD006-MXFP8-PAGE-SIZE",
            "SGLang's MXFP8 KV writes assert the page-interleaved scale layout, which exists only at "
            f"--page-size 128 (got {ctx.flags.page_size}; --attention-backend fa4 forces 128).",
            rules.located(rules.MXFP8_INTERLEAVED_SOURCE),
        )
    if interleaved and dims - {rules.MXFP8_INTERLEAVED_HEAD_DIM}:
        yield Hazard(
            ERROR,
            "KVD010-MXFP8-INTERLEAVED-HEAD-DIM",
            "at --page-size 128 SGLang stores MXFP8 scales page-interleaved, which packs exactly four "
            f"scales (head_dim 128) per slot and head; head_dim {sorted(dims)} fails its store "
            "assert.",
            rules.located(rules.MXFP8_INTERLEAVED_SOURCE),
        )
    if ctx.spec.full is not None and ctx.spec.full.mla:
        yield Hazard(
            ERROR,
            "KVD007-MXFP8-ON-MLA",
            "SGLang has no MXFP8 pool for MLA latent KV; use fp8_e4m3 or bf16.",
            rules.located(rules.MXFP8_POOL_SOURCE),
        )


def mxfp8_hardware(ctx: Context) -> Iterator[Hazard]:
    """On a Hopper GPU SGLang refuses --kv-cache-dtype mxfp8 at start-up (KVD014 carries its message);
    on Blackwell the requirement holds and there is nothing to warn about."""
    if ctx.spec.kv_dtype.flag == "mxfp8" and not ctx.platform.is_sm100:
        yield Hazard(
            WARNING,
            "KVD008-MXFP8-NEEDS-SM100",
            f"SGLang's MXFP8 KV path needs SM{rules.MXFP8_MIN_SM}+ (Blackwell) with --attention-backend fa4; "
            "on H100/H200 the server refuses it (kvdoctor's own kernels still run there).",
            rules.located(rules.MXFP8_SM100_SOURCE),
        )


def pd_scales_not_transferred(ctx: Context) -> Iterator[Hazard]:
    scales = [c.name for c in ctx.spec.components if c.name.endswith("_scales")]
    if ctx.flags.disaggregation_mode != "null" and scales and "BLOCK_SCALE" not in pd_state_types(ctx.spec, ctx.layout):
        yield Hazard(
            ERROR,
            "KVD011-PD-BLOCK-SCALES-NOT-TRANSFERRED",
            f"a PD transfer from a {ctx.layout.kv_pool} registers no BLOCK_SCALE state: decode would "
            f"read {', '.join(scales)} that prefill never sent. Use a KV dtype without block scales "
            "here.",
            rules.located(rules.PD_BLOCK_SCALE_SOURCE),
        )


def swa_pool_too_small(ctx: Context) -> Iterator[Hazard]:
    window, swa_tokens = ctx.spec.sliding_window, ctx.sizing.swa_tokens
    if window is not None and swa_tokens is not None and window + ctx.flags.page_size >= swa_tokens:
        yield Hazard(
            ERROR,
            "KVD012-SWA-POOL-TOO-SMALL",
            f"the SWA pool ({swa_tokens} tokens) cannot hold even one request's window ({window}) plus a "
            f"page ({ctx.flags.page_size}): SGLang refuses to start. Raise --max-total-tokens or "
            "--swa-full-tokens-ratio.",
            rules.located((*rules.SIZING_SOURCE, rules.RATIO_FALLBACK_SOURCE, *rules.RATIO_OVERRIDES_SOURCE)),
        )


def all_swa_paged(ctx: Context) -> Iterator[Hazard]:
    if ctx.spec.full is None and ctx.spec.swa is not None and ctx.flags.page_size != rules.ALL_SWA_PAGE_SIZE:
        yield Hazard(
            ERROR,
            "KVD013-ALL-SWA-PAGED",
            "a model whose every attention layer is sliding-window runs on SGLang's pure-SWA allocator, "
            f"which only supports --page-size 1 (got {ctx.flags.page_size}).",
            rules.located(rules.ALL_SWA_PAGE_SOURCE),
        )


def not_modelled(ctx: Context) -> Iterator[Hazard]:
    if ctx.flags.not_modelled:
        yield Hazard(
            INFO, "KVD009-FLAGS-NOT-MODELLED", f"flags accepted but not modelled: {' '.join(ctx.flags.not_modelled)}"
        )


RULES: tuple[Callable[[Context], Iterator[Hazard]], ...] = (
    sglang_refuses,
    ssm_on_host_pool,
    block_scales_dropped,
    other_state_lost,
    mxfp8_alignment,
    mxfp8_hardware,
    pd_scales_not_transferred,
    swa_pool_too_small,
    all_swa_paged,
    not_modelled,
)


def find_hazards(ctx: Context) -> tuple[Hazard, ...]:
    return tuple(h for rule in RULES for h in rule(ctx))


def rules_for(server: str) -> tuple[Callable[..., Iterator[Hazard]], ...]:
    """The one registry of hazard rules, per server: SGLang's above (KVD0xx, over ``Context``), vLLM's
    (KVD1xx, over ``kvdoctor.core.vllm.hazards.VllmContext``) imported only when asked for."""
    if server == "vllm":
        from kvdoctor.core.vllm.hazards import VLLM_RULES

        return VLLM_RULES
    return RULES
