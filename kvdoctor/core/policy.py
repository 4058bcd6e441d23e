"""SGLang's decisions for a spec under the flags: pool layout, mamba contract, retraction backup.

Each decision carries its reasons, so ``inspect`` can show *why* a backend was chosen and a test
can flip exactly one condition and watch the verdict move.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvdoctor.core import rules
from kvdoctor.core.flags import ServerFlags
from kvdoctor.core.spec import StateSpec


@dataclass(frozen=True)
class PoolLayout:
    """Which pool classes hold the state, and whether the KV pool's CPU copy carries the SSM state."""

    kv_pool: str  # the pool the allocator hands out (allocator.get_kvcache())
    full_pool: str | None  # the class of the full-attention (sub-)pool
    swa_pool: str | None
    req_to_token_pool: str
    mamba_pool: str | None
    cpu_copy_carries_mamba: bool

    @property
    def caller_backs_up_mamba(self) -> bool:
        """``_mamba_pool_needing_backup``: the caller must copy the recurrent state itself."""
        return (
            not self.cpu_copy_carries_mamba
            and self.req_to_token_pool == "HybridReqToTokenPool"
            and self.mamba_pool is not None
        )

    def pool_of(self, sub_pool: str) -> str:
        """The class holding a component of SUB_POOL ("full", "swa", "mamba")."""
        owner = {"full": self.full_pool, "swa": self.swa_pool, "mamba": self.mamba_pool}[sub_pool]
        return owner or "?"


@dataclass(frozen=True)
class Platform:
    """Facts about the serving build that no flag states; kvdoctor models a CUDA build by default."""

    hip: bool = False
    mtp_draft_pools: bool = False
    dspark_speculation: bool = False


@dataclass(frozen=True)
class Condition:
    """One conjunct of the host_pool rule, evaluated: its value and whether it allows host_pool."""

    name: str
    meaning: str
    source: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class BackupDecision:
    """The retraction backup backend SGLang would resolve on this server, and why."""

    backend: str
    applies: bool  # only a PD decode server backs retracted requests up
    explicit: bool  # given by --disaggregation-decode-retraction-backup (no inference)
    conditions: tuple[Condition, ...]
    hicache_ratio: float | None
    hicache_ratio_reason: str


def pool_layout(spec: StateSpec) -> PoolLayout:
    """kv_cache_configurator / memory_pool: the pool classes the spec lands in."""
    cls = spec.classification
    kv_pool_class = spec.kv_dtype.mha_pool
    if spec.full is not None and spec.full.mla:
        kv_pool_class = "MLATokenToKVPoolFP4" if spec.kv_dtype.payload_bits == 4 else "MLATokenToKVPool"
    full_pool = kv_pool_class if spec.full is not None else None
    swa_pool = spec.kv_dtype.mha_pool if spec.swa is not None else None
    if cls.is_hybrid_swa:
        kv_pool = "SWAKVPool"
    elif cls.uses_ssm_state:
        kv_pool = "HybridLinearKVPool"
    else:
        kv_pool = kv_pool_class
    return PoolLayout(
        kv_pool=kv_pool,
        full_pool=full_pool,
        swa_pool=swa_pool,
        req_to_token_pool="HybridReqToTokenPool" if cls.uses_ssm_state else "ReqToTokenPool",
        mamba_pool="MambaPool" if spec.recurrent is not None else None,
        cpu_copy_carries_mamba=rules.CARRIES_MAMBA.get(kv_pool, False),
    )


def _condition_values(
    spec: StateSpec, layout: PoolLayout, flags: ServerFlags, platform: Platform
) -> dict[str, tuple[bool, str]]:
    cls = spec.classification
    draft_ok = not flags.enable_unified_memory or not platform.mtp_draft_pools or platform.dspark_speculation
    preemption = flags.enable_priority_scheduling and not flags.disable_priority_preemption
    full_tokens_ok = spec.full is not None and bool(spec.full.layers)
    layout_ok = layout.kv_pool in rules.HOST_POOL_LAYOUTS or (layout.kv_pool == "SWAKVPool" and full_tokens_ok)
    return {
        "decode_server": (flags.is_decode, f"--disaggregation-mode {flags.disaggregation_mode}"),
        "not_hip": (not platform.hip, "ROCm build" if platform.hip else "CUDA build"),
        "no_dcp": (not flags.dcp_enabled, f"--dcp-size {flags.dcp_size}"),
        "no_decode_radix_cache": (not flags.disaggregation_decode_enable_radix_cache,
                                  f"radix cache {'on' if flags.disaggregation_decode_enable_radix_cache else 'off'}"),
        "no_decode_offload": (not flags.disaggregation_decode_enable_offload_kvcache,
                              f"offload {'on' if flags.disaggregation_decode_enable_offload_kvcache else 'off'}"),
        "no_priority_preemption": (not preemption, f"priority preemption {'on' if preemption else 'off'}"),
        "no_recurrent_state": (not cls.uses_ssm_state,
                               f"uses_ssm_state={cls.uses_ssm_state} ({cls.predicate or 'no SSM predicate'})"),
        "no_unified_hybrid_swa": (not (flags.enable_unified_memory and cls.is_hybrid_swa),
                                  f"unified memory {'on' if flags.enable_unified_memory else 'off'}, "
                                  f"hybrid SWA {cls.is_hybrid_swa}"),
        "unified_draft_ok": (draft_ok, f"MTP draft pools {'yes' if platform.mtp_draft_pools else 'no'}"),
        "host_pool_kv_layout": (layout_ok, f"KV pool {layout.kv_pool}"),
    }  # fmt: skip


def _hicache_ratio(backend: str, flags: ServerFlags) -> tuple[float | None, str]:
    """kv_cache_builder.py:245-261: only a decode server resolves an unset ratio."""
    if flags.hicache_ratio is not None:
        return flags.hicache_ratio, "--hicache-ratio given"
    if not flags.is_decode:
        return None, "not resolved here (only a decode server resolves an unset ratio)"
    if backend == "host_pool" and not flags.enable_hierarchical_cache:
        reason = "backup-only host pool (BACKUP_ONLY_HICACHE_RATIO)"
        if flags.hicache_size == 0:
            reason += "; at least one max-length request (needs the device pool size at run time)"
        return rules.BACKUP_ONLY_HICACHE_RATIO, reason
    return rules.DEFAULT_HICACHE_RATIO, "standard HiCache default"


def decide_backup(
    spec: StateSpec, layout: PoolLayout, flags: ServerFlags, platform: Platform = Platform()
) -> BackupDecision:
    """resolve_decode_retraction_backup, with every condition's value kept."""
    values = _condition_values(spec, layout, flags, platform)
    conditions = tuple(
        Condition(c.name, c.meaning, c.source, *values[c.name]) for c in rules.BACKUP_CONDITIONS
    )
    explicit = flags.disaggregation_decode_retraction_backup
    inferred = "host_pool" if all(c.passed for c in conditions) else "cpu_tensor"
    backend = explicit if explicit is not None else inferred
    ratio, reason = _hicache_ratio(backend, flags)
    return BackupDecision(backend, flags.is_decode, explicit is not None, conditions, ratio, reason)


def pd_state_types(spec: StateSpec) -> tuple[str, ...]:
    """The StateType members a PD transfer of this spec carries beside the main KV buffers."""
    types: list[str] = []
    if spec.swa is not None:
        types.append("SWA")
    if spec.recurrent is not None:
        types.append("MAMBA")
    if spec.kv_dtype.block_scaled:
        if spec.component("full_kv_scales") is not None:
            types.append("BLOCK_SCALE")
        if spec.swa is not None:
            types.append("BLOCK_SCALE_SWA")
    return tuple(types)


def backup_carries(backend: str, spec: StateSpec, layout: PoolLayout, page_size: int) -> frozenset[str]:
    """The components a retraction on BACKEND brings back, as the pools and protocol stand."""
    scales = {"full_kv_scales", "swa_kv_scales"}
    if backend == "none":
        return frozenset()
    if backend == "host_pool":
        carried = {n for n in spec.names if n in rules.HOST_POOL_CARRIES}
        if spec.kv_dtype.flag == "mxfp8" and page_size == rules.MXFP8_INTERLEAVED_PAGE:
            carried |= scales & set(spec.names)
        return frozenset(carried)
    carried = set(spec.names)
    pools = {layout.full_pool, layout.swa_pool}
    if pools & rules.CPU_COPY_DROPS_SCALES:
        carried -= scales
    if spec.recurrent is not None and not (layout.cpu_copy_carries_mamba or layout.caller_backs_up_mamba):
        carried -= {"conv_state", "temporal_state"}
    return frozenset(carried)
