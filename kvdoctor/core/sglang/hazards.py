"""SGLang's hazards (KVD0xx): rules over the spec, the policy and the flags that a person can act on.

Each code is one :class:`~kvdoctor.core.registry.Rule` record below (severity, the README's line for it,
the SGLang source it restates), registered with the checks that emit it into the one registry of both
servers (``kvdoctor.core.registry``).
"""

from __future__ import annotations

from collections.abc import Iterator

from kvdoctor.core import registry
from kvdoctor.core.cite import located
from kvdoctor.core.record import record
from kvdoctor.core.registry import ERROR, INFO, WARNING, Hazard, Rule
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
from kvdoctor.core.sglang.refusals import Refusal
from kvdoctor.core.sglang.sizing import Sizing
from kvdoctor.core.sglang.spec import StateSpec

SERVER = "sglang"

SSM_ON_HOST_POOL = Rule(
    SERVER,
    "KVD001-SSM-ON-HOST-POOL",
    (ERROR,),
    "recurrent state on the `host_pool` retraction backup (an explicit flag, or a host-receive threshold below 1, "
    "puts it there): SGLang 0.5.23 refuses the launch (KVD014); a server without that check starts and, its host "
    "pool having no recurrent-state sidecar, resumes every retracted request on another request's state",
    (rules.REFUSALS["host_pool_mamba"].source,),
)
BLOCK_SCALES_DROPPED = Rule(
    SERVER,
    "KVD002-BLOCK-SCALES-DROPPED",
    (ERROR,),
    "block scales a backup path does not copy (FP4 CPU copies; the plain HiCache host pool for non-interleaved MXFP8)",
    (rules.HOST_POOL_SCALES_SOURCE, *rules.CPU_COPY_SCALES_SOURCE),
)
NO_RETRACTION_BACKUP = Rule(
    SERVER,
    "KVD003-NO-RETRACTION-BACKUP",
    (WARNING,),
    "backup `none`: retracted requests are aborted with HTTP 503",
    (rules.RETRACTION_BACKUPS_SOURCE,),
)
STATE_NOT_BACKED_UP = Rule(
    SERVER,
    "KVD004-STATE-NOT-BACKED-UP",
    (ERROR,),
    "any other component a cpu_tensor retraction leaves behind",
    (*rules.CARRIES_MAMBA_SOURCE, rules.MAMBA_BACKUP_SOURCE),
)
MXFP8_HEAD_DIM = Rule(
    SERVER,
    "KVD005-MXFP8-HEAD-DIM",
    (ERROR,),
    "MXFP8 on a head_dim that is not a multiple of 32",
    (rules.MXFP8_POOL_SOURCE,),
)
MXFP8_PAGE_SIZE = Rule(
    SERVER,
    "KVD006-MXFP8-PAGE-SIZE",
    (ERROR,),
    "MXFP8 writes need the page-interleaved scale layout, i.e. `--page-size 128`",
    rules.MXFP8_INTERLEAVED_SOURCE,
)
MXFP8_ON_MLA = Rule(
    SERVER,
    "KVD007-MXFP8-ON-MLA",
    (ERROR,),
    "there is no MXFP8 pool for MLA latent KV",
    (rules.MXFP8_POOL_SOURCE,),
)
MXFP8_NEEDS_SM100 = Rule(
    SERVER,
    "KVD008-MXFP8-NEEDS-SM100",
    (WARNING,),
    "SGLang's MXFP8 KV path needs Blackwell (SM100+) and FA4",
    (rules.MXFP8_SM100_SOURCE,),
)
FLAGS_NOT_MODELLED = Rule(SERVER, "KVD009-FLAGS-NOT-MODELLED", (INFO,), "flags accepted but not modelled")
MXFP8_INTERLEAVED_HEAD_DIM = Rule(
    SERVER,
    "KVD010-MXFP8-INTERLEAVED-HEAD-DIM",
    (ERROR,),
    "page-interleaved MXFP8 scales need head_dim 128",
    rules.MXFP8_INTERLEAVED_SOURCE,
)
PD_BLOCK_SCALES_NOT_TRANSFERRED = Rule(
    SERVER,
    "KVD011-PD-BLOCK-SCALES-NOT-TRANSFERRED",
    (ERROR,),
    "a PD transfer that registers no BLOCK_SCALE state for a block-scaled pool (hybrid-linear MXFP8, FP4)",
    rules.PD_BLOCK_SCALE_SOURCE,
)
SWA_POOL_TOO_SMALL = Rule(
    SERVER,
    "KVD012-SWA-POOL-TOO-SMALL",
    (ERROR,),
    "the SWA pool cannot hold one window plus a page: SGLang refuses to start",
    (*rules.SIZING_SOURCE, rules.RATIO_FALLBACK_SOURCE, *rules.RATIO_OVERRIDES_SOURCE),
)
ALL_SWA_PAGED = Rule(
    SERVER,
    "KVD013-ALL-SWA-PAGED",
    (ERROR,),
    "an all-sliding-window model with `--page-size` > 1",
    (rules.ALL_SWA_PAGE_SOURCE,),
)
SGLANG_REFUSES = Rule(
    SERVER,
    "KVD014-SGLANG-REFUSES",
    (ERROR,),
    "SGLang 0.5.23 refuses this launch at start-up; the message and `where` are SGLang's own (message and file:lines)",
    tuple(refusal.source for refusal in rules.REFUSALS.values()),
)
# Emitted by the engine adapter (``kvdoctor.engines.sglang.inspect``), not by a check of this module.
RULES_DRIFT = Rule(
    SERVER,
    "KVD015-RULES-DRIFT",
    (ERROR,),
    "`--engine sglang` only: the installed SGLang answers a field differently from kvdoctor's rules (field, both "
    "answers, SGLang version)",
)


@record(frozen=True)
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
        yield SSM_ON_HOST_POOL.hazard(
            f"recurrent state (conv/SSM) on the host_pool retraction backup. SGLang 0.5.23 refuses this "
            f"launch at start-up (KVD014, {refused.where}); a server without that check (an SGLang "
            "build or fork whose tree cache does not refuse Mamba models) starts, and since the host "
            "pool has no recurrent-state sidecar, every retracted request then silently resumes on "
            f"another request's state. {fix}",
            refused.where,
        )


def sglang_refuses(ctx: Context) -> Iterator[Hazard]:
    for refusal in ctx.refusals:
        yield SGLANG_REFUSES.hazard(
            f'SGLang 0.5.23 refuses this launch at start-up: "{refusal.message}" ({refusal.where})',
            refusal.where,
        )


def block_scales_dropped(ctx: Context) -> Iterator[Hazard]:
    lost = [n for n in _lost_components(ctx) if n.endswith("_scales")]
    if lost:
        yield BLOCK_SCALES_DROPPED.hazard(
            f"--kv-cache-dtype {ctx.spec.kv_dtype.flag} keeps per-block scales ({', '.join(lost)}) that the "
            f"{ctx.backup.backend} retraction path does not copy: restored KV decodes with stale scales. "
            "Use a path that carries them (mxfp8 at --page-size 128, cpu_tensor for mxfp8) or an "
            "unscaled KV dtype (fp8_e4m3, bf16).",
            located(
                rules.HOST_POOL_SCALES_SOURCE if ctx.backup.backend == "host_pool" else rules.CPU_COPY_SCALES_SOURCE
            ),
        )


def other_state_lost(ctx: Context) -> Iterator[Hazard]:
    if ctx.backup.backend == "host_pool":
        return  # reported by KVD001 with its own advice
    lost = [n for n in _lost_components(ctx) if not n.endswith("_scales")]
    if ctx.backup.applies and ctx.backup.backend == "none":
        yield NO_RETRACTION_BACKUP.hazard(
            "--disaggregation-decode-retraction-backup none keeps no backup: every retracted request is "
            "aborted with HTTP 503 instead of resumed.",
            located(NO_RETRACTION_BACKUP.cites),
        )
    elif lost:
        yield STATE_NOT_BACKED_UP.hazard(
            f"the {ctx.backup.backend} retraction backup leaves {', '.join(lost)} behind on a slot "
            "that another request will reuse.",
            located(STATE_NOT_BACKED_UP.cites),
        )


def mxfp8_alignment(ctx: Context) -> Iterator[Hazard]:
    if ctx.spec.kv_dtype.flag != "mxfp8":
        return
    dims = {g.head_dim for g in (ctx.spec.full, ctx.spec.swa) if g is not None and not g.mla}
    dims |= {g.v_head_dim for g in (ctx.spec.full, ctx.spec.swa) if g is not None and not g.mla}
    bad = sorted(d for d in dims if d % rules.MXFP8_ALIGNMENT)
    if bad:
        yield MXFP8_HEAD_DIM.hazard(
            f"MXFP8 scales cover 32 elements of head_dim, but head_dim {bad} is not a multiple of 32: "
            "SGLang refuses to build the pool.",
            located(MXFP8_HEAD_DIM.cites),
        )
    interleaved = ctx.flags.page_size == rules.MXFP8_INTERLEAVED_PAGE
    if not interleaved:
        yield MXFP8_PAGE_SIZE.hazard(
            "SGLang's MXFP8 KV writes assert the page-interleaved scale layout, which exists only at "
            f"--page-size 128 (got {ctx.flags.page_size}; --attention-backend fa4 forces 128).",
            located(MXFP8_PAGE_SIZE.cites),
        )
    if interleaved and dims - {rules.MXFP8_INTERLEAVED_HEAD_DIM}:
        yield MXFP8_INTERLEAVED_HEAD_DIM.hazard(
            "at --page-size 128 SGLang stores MXFP8 scales page-interleaved, which packs exactly four "
            f"scales (head_dim 128) per slot and head; head_dim {sorted(dims)} fails its store "
            "assert.",
            located(MXFP8_INTERLEAVED_HEAD_DIM.cites),
        )
    if ctx.spec.full is not None and ctx.spec.full.mla:
        yield MXFP8_ON_MLA.hazard(
            "SGLang has no MXFP8 pool for MLA latent KV; use fp8_e4m3 or bf16.",
            located(MXFP8_ON_MLA.cites),
        )


def mxfp8_hardware(ctx: Context) -> Iterator[Hazard]:
    """On a Hopper GPU SGLang refuses --kv-cache-dtype mxfp8 at start-up (KVD014 carries its message);
    on Blackwell the requirement holds and there is nothing to warn about."""
    if ctx.spec.kv_dtype.flag == "mxfp8" and not ctx.platform.is_sm100:
        yield MXFP8_NEEDS_SM100.hazard(
            f"SGLang's MXFP8 KV path needs SM{rules.MXFP8_MIN_SM}+ (Blackwell) with --attention-backend fa4; "
            "on H100/H200 the server refuses it (kvdoctor's own kernels still run there).",
            located(MXFP8_NEEDS_SM100.cites),
        )


def pd_scales_not_transferred(ctx: Context) -> Iterator[Hazard]:
    scales = [c.name for c in ctx.spec.components if c.name.endswith("_scales")]
    if ctx.flags.disaggregation_mode != "null" and scales and "BLOCK_SCALE" not in pd_state_types(ctx.spec, ctx.layout):
        yield PD_BLOCK_SCALES_NOT_TRANSFERRED.hazard(
            f"a PD transfer from a {ctx.layout.kv_pool} registers no BLOCK_SCALE state: decode would "
            f"read {', '.join(scales)} that prefill never sent. Use a KV dtype without block scales "
            "here.",
            located(PD_BLOCK_SCALES_NOT_TRANSFERRED.cites),
        )


def swa_pool_too_small(ctx: Context) -> Iterator[Hazard]:
    window, swa_tokens = ctx.spec.sliding_window, ctx.sizing.swa_tokens
    if window is not None and swa_tokens is not None and window + ctx.flags.page_size >= swa_tokens:
        yield SWA_POOL_TOO_SMALL.hazard(
            f"the SWA pool ({swa_tokens} tokens) cannot hold even one request's window ({window}) plus a "
            f"page ({ctx.flags.page_size}): SGLang refuses to start. Raise --max-total-tokens or "
            "--swa-full-tokens-ratio.",
            located(SWA_POOL_TOO_SMALL.cites),
        )


def all_swa_paged(ctx: Context) -> Iterator[Hazard]:
    if ctx.spec.full is None and ctx.spec.swa is not None and ctx.flags.page_size != rules.ALL_SWA_PAGE_SIZE:
        yield ALL_SWA_PAGED.hazard(
            "a model whose every attention layer is sliding-window runs on SGLang's pure-SWA allocator, "
            f"which only supports --page-size 1 (got {ctx.flags.page_size}).",
            located(ALL_SWA_PAGED.cites),
        )


def not_modelled(ctx: Context) -> Iterator[Hazard]:
    if ctx.flags.not_modelled:
        yield FLAGS_NOT_MODELLED.hazard(f"flags accepted but not modelled: {' '.join(ctx.flags.not_modelled)}")


CHECKS = (
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
registry.register(
    SERVER,
    (
        SSM_ON_HOST_POOL,
        BLOCK_SCALES_DROPPED,
        NO_RETRACTION_BACKUP,
        STATE_NOT_BACKED_UP,
        MXFP8_HEAD_DIM,
        MXFP8_PAGE_SIZE,
        MXFP8_ON_MLA,
        MXFP8_NEEDS_SM100,
        FLAGS_NOT_MODELLED,
        MXFP8_INTERLEAVED_HEAD_DIM,
        PD_BLOCK_SCALES_NOT_TRANSFERRED,
        SWA_POOL_TOO_SMALL,
        ALL_SWA_PAGED,
        SGLANG_REFUSES,
        RULES_DRIFT,
    ),
    CHECKS,
)
