"""SGLang's decisions for a spec under the flags: pool layout, mamba contract, retraction backup.

Each decision carries its reasons, so ``inspect`` can show *why* a backend was chosen and a test
can flip exactly one condition and watch the verdict move.
"""

from __future__ import annotations

from kvdoctor.core.cite import shown
from kvdoctor.core.record import record
from kvdoctor.core.sglang import rules
from kvdoctor.core.sglang.flags import ServerFlags
from kvdoctor.core.sglang.spec import StateSpec


@record(frozen=True)
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
            and self.req_to_token_pool in rules.HYBRID_REQ_POOLS
            and self.mamba_pool is not None
        )

    def pool_of(self, sub_pool: str) -> str:
        """The class holding a component of SUB_POOL ("full", "swa", "mamba")."""
        owner = {"full": self.full_pool, "swa": self.swa_pool, "mamba": self.mamba_pool}[sub_pool]
        return owner or "?"


@record(frozen=True)
class Platform:
    """Facts about the serving build that no flag states; kvdoctor models a CUDA build by default."""

    hip: bool = False
    mtp_draft_pools: bool = False
    dspark_speculation: bool = False
    gpu_arch: str = rules.DEFAULT_GPU_ARCH  # "sm100" (Blackwell) or "sm90" (Hopper): rules.GPU_ARCHS

    def __post_init__(self) -> None:
        if self.gpu_arch not in rules.GPU_ARCHS:
            raise ValueError(f"gpu_arch must be one of {', '.join(rules.GPU_ARCHS)}, not {self.gpu_arch!r}")

    @property
    def is_sm100(self) -> bool:
        """A Blackwell (SM100) GPU: SGLang's is_sm100 / is_blackwell platform facts."""
        return self.gpu_arch == "sm100"


DEFAULT_PLATFORM = Platform()  # a CUDA build on a Blackwell (SM100) GPU


@record(frozen=True)
class Condition:
    """One conjunct of the host_pool rule, evaluated: its value and whether it allows host_pool."""

    name: str
    meaning: str
    source: str
    passed: bool
    detail: str  # the value as the JSON has always carried it (``uses_ssm_state=True (mamba2_config)``)
    shown: str = ""  # the same value as a person writes it, where that differs (``SSM state yes …``)


@record(frozen=True)
class BackupDecision:
    """The retraction backup backend SGLang would resolve on this server, and why."""

    backend: str
    applies: bool  # only a PD decode server backs retracted requests up
    explicit: bool  # fixed by a flag, so the conditions below were not consulted
    source: str  # "flag", "host-receive threshold" or "inferred"
    conditions: tuple[Condition, ...]
    hicache_ratio: float | None
    hicache_ratio_reason: str


def pool_layout(spec: StateSpec, *, decode: bool = False) -> PoolLayout:
    """kv_cache_configurator / memory_pool: the pool classes the spec lands in (DECODE: on a PD decode
    server, which builds the decode request pools, ``rules.REQ_POOL_SOURCE``)."""
    cls = spec.classification
    req_pool = rules.REQ_POOLS[(decode, cls.uses_ssm_state)]
    if cls.is_dsv4:  # its own pool, not an SWAKVPool (rules.DSV4_POOL_SOURCE)
        return PoolLayout(rules.DSV4_POOL, rules.DSV4_POOL, rules.DSV4_SWA_POOL, req_pool, None, False)
    mla_pool = rules.DSA_POOL if cls.is_dsa else "MLATokenToKVPool"
    kv_pool_class = mla_pool if spec.full is not None and spec.full.mla else spec.kv_dtype.mha_pool
    full_pool = kv_pool_class if spec.full is not None else None
    swa_pool = spec.kv_dtype.mha_pool if spec.swa is not None else None
    if cls.is_hybrid_swa:
        # SWAKVPool builds both sub-pools, one of them with no layers if need be (swa_memory_pool.py).
        kv_pool = "SWAKVPool"
        full_pool, swa_pool = kv_pool_class, spec.kv_dtype.mha_pool
    elif cls.uses_ssm_state:
        kv_pool = "HybridLinearKVPool"
    else:
        kv_pool = kv_pool_class
    return PoolLayout(
        kv_pool=kv_pool,
        full_pool=full_pool,
        swa_pool=swa_pool,
        req_to_token_pool=req_pool,
        mamba_pool="MambaPool" if spec.recurrent is not None else None,
        cpu_copy_carries_mamba=rules.CARRIES_MAMBA.get(kv_pool, False),
    )


def _condition_values(
    spec: StateSpec, layout: PoolLayout, flags: ServerFlags, platform: Platform
) -> dict[str, tuple[bool, str] | tuple[bool, str, str]]:
    """Each condition's (holds, detail[, shown]): ``shown`` where the JSON's raw spelling is Python's."""
    cls = spec.classification
    draft_ok = not flags.enable_unified_memory or not platform.mtp_draft_pools or platform.dspark_speculation
    preemption = flags.enable_priority_scheduling and not flags.disable_priority_preemption
    full_tokens_ok = spec.full is not None and bool(spec.full.layers)
    layout_ok = layout.kv_pool in rules.HOST_POOL_LAYOUTS or (layout.kv_pool == "SWAKVPool" and full_tokens_ok)
    return {
        "decode_server": (flags.is_decode, f"--disaggregation-mode {flags.disaggregation_mode}"),
        "not_hip": (not platform.hip, "ROCm build" if platform.hip else "CUDA build"),
        "no_dcp": (not flags.dcp_enabled, f"--dcp-size {flags.dcp_size}"),
        "no_decode_radix_cache": (
            not flags.disaggregation_decode_enable_radix_cache,
            f"radix cache {'on' if flags.disaggregation_decode_enable_radix_cache else 'off'}",
        ),
        "no_decode_offload": (
            not flags.disaggregation_decode_enable_offload_kvcache,
            f"offload {'on' if flags.disaggregation_decode_enable_offload_kvcache else 'off'}",
        ),
        "no_priority_preemption": (not preemption, f"priority preemption {'on' if preemption else 'off'}"),
        "no_recurrent_state": (
            not cls.uses_ssm_state,
            f"uses_ssm_state={cls.uses_ssm_state} ({cls.predicate or 'no SSM predicate'})",
            f"SSM state {'yes' if cls.uses_ssm_state else 'no'} ({cls.predicate or 'no SSM predicate'})",
        ),
        "no_unified_hybrid_swa": (
            not (flags.enable_unified_memory and cls.is_hybrid_swa),
            f"unified memory {'on' if flags.enable_unified_memory else 'off'}, hybrid SWA {cls.is_hybrid_swa}",
            f"unified memory {'on' if flags.enable_unified_memory else 'off'}, "
            f"hybrid SWA {'yes' if cls.is_hybrid_swa else 'no'}",
        ),
        "unified_draft_ok": (draft_ok, f"MTP draft pools {'yes' if platform.mtp_draft_pools else 'no'}"),
        "host_pool_kv_layout": (layout_ok, f"KV pool {layout.kv_pool}"),
    }


def _hicache_ratio(
    backend: str, flags: ServerFlags, pool_tokens: int | None, context_len: int | None
) -> tuple[float | None, str]:
    """The host/device ratio SGLang resolves (``rules.HICACHE_RATIO_SOURCE``, ``NON_DECODE_HICACHE_SOURCE``).

    A server that is not a decode server resolves an unset ratio at start-up (2.0, or 1.2 when the
    HiCache host memory is a buffer only); a decode server resolves it against its backup backend.
    """
    if flags.hicache_ratio is not None:
        return flags.hicache_ratio, "--hicache-ratio given"
    if not flags.is_decode:
        if flags.hicache_host_memory_mode == "buffer_only":
            return rules.BUFFER_ONLY_HICACHE_RATIO, "HiCache default for buffer_only host memory"
        return rules.NON_DECODE_HICACHE_RATIO, "standard HiCache default (not a decode server)"
    if backend != "host_pool" or flags.enable_hierarchical_cache:
        return rules.DEFAULT_HICACHE_RATIO, "standard HiCache default"
    floor = rules.BACKUP_ONLY_HICACHE_RATIO
    if flags.hicache_size > 0:
        return floor, "backup-only host pool (--hicache-size sets the host pool)"
    if not pool_tokens or context_len is None:
        return floor, "backup-only host pool: at least this, raised to fit one max-length request"
    # decode_retraction_max_tokens: one max-length request (a request-to-token row is the context plus
    # REQ_TO_TOKEN_EXTRA, less one), page-aligned; doubled when one request can receive while another
    # is retracted.
    page = flags.page_size
    longest = context_len + rules.REQ_TO_TOKEN_EXTRA - 1
    min_tokens = -(-min(longest, pool_tokens) // page) * page
    if flags.disaggregation_decode_host_receive_threshold < 1:
        min_tokens *= 2
    ratio = max(floor, min_tokens / pool_tokens)
    return ratio, f"backup-only host pool sized to {min_tokens} tokens of a {pool_tokens}-token pool"


def decide_backup(
    spec: StateSpec,
    layout: PoolLayout,
    flags: ServerFlags,
    platform: Platform = DEFAULT_PLATFORM,
    *,
    pool_tokens: int | None = None,
    context_len: int | None = None,
) -> BackupDecision:
    """resolve_decode_retraction_backup, with every condition's value kept."""
    values = _condition_values(spec, layout, flags, platform)
    conditions = tuple(Condition(c.name, c.meaning, shown(c.source), *values[c.name]) for c in rules.BACKUP_CONDITIONS)
    inferred = "host_pool" if all(c.passed for c in conditions) else "cpu_tensor"
    declared = flags.retraction_backup_declared  # a threshold below 1 declares host_pool, over an explicit none
    if declared is None:
        backend, source = inferred, "inferred"
    elif declared == flags.disaggregation_decode_retraction_backup:
        backend, source = declared, "flag"
    else:
        backend, source = declared, "host-receive threshold"
    ratio, reason = _hicache_ratio(backend, flags, pool_tokens, context_len)
    return BackupDecision(backend, flags.is_decode, source != "inferred", source, conditions, ratio, reason)


def pd_state_types(spec: StateSpec, layout: PoolLayout) -> tuple[str, ...]:
    """The StateType members a PD transfer registers beside the main KV buffers, in SGLang's order.

    setup_state_kv_args (``rules.PD_STATE_TYPES_SOURCE``): block scales for an MXFP8 pool (a top-level
    one, or each sub-pool of an SWAKVPool, which builds both even when one has no layers,
    ``rules.PD_BLOCK_SCALE_SOURCE``); a HybridLinearKVPool registers MAMBA (then DSA for a DSA full
    pool); a DSATokenToKVPool its index cache (``rules.DSA_PD_SOURCE``); DeepSeek-V4 its window and
    request state (``rules.DSV4_PD_SOURCE``); the request pool's MAMBA comes last when not yet there.
    """
    types: list[str] = []
    block_scaled = rules.PD_BLOCK_SCALE_POOLS
    cls = spec.classification
    if layout.kv_pool in block_scaled:
        types.append("BLOCK_SCALE")
    dsa = ["DSA", *(["DSA_TAIL"] if spec.dsa_tail else [])] if cls.is_dsa and layout.full_pool == rules.DSA_POOL else []
    if layout.kv_pool == "SWAKVPool":
        types.append("SWA")
        if layout.full_pool in block_scaled:
            types.append("BLOCK_SCALE")
        if layout.swa_pool in block_scaled:
            types.append("BLOCK_SCALE_SWA")
    elif layout.kv_pool == rules.DSV4_POOL:
        types.append("SWA")
        if spec.dsv4_request_state:
            types.append("DSV4_REQUEST_STATE")
    elif layout.kv_pool == "HybridLinearKVPool":
        types += ["MAMBA", *dsa]
    elif layout.kv_pool == rules.DSA_POOL:
        types += dsa
    if spec.recurrent is not None and "MAMBA" not in types:
        types.append("MAMBA")
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
    carried = set(spec.names)  # a DSA pool's copy carries its index keys too (rules.DSA_CPU_COPY_SOURCE)
    if spec.kv_dtype.flag not in rules.CPU_COPY_CARRIES_SCALES:
        carried -= scales
    if spec.recurrent is not None and not (layout.cpu_copy_carries_mamba or layout.caller_backs_up_mamba):
        carried -= {"conv_state", "temporal_state"}
    return frozenset(carried)
