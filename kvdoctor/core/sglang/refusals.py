"""The launches SGLang itself refuses at start-up: hazard KVD014, a finding about a well-formed launch.

Malformed input is refused where it enters (``core/config_checks.py`` for a config, ``flags.py`` for a
flag), exit 2. A config and flags that are each well formed can still make SGLang 0.5.23 refuse to
start; ``launch_refusals`` lists every such refusal (SGLang stops at the first), each carrying
SGLang's message and the place it raises (``rules.REFUSALS``), and the rest of the analysis is still
shown.
"""

from __future__ import annotations

from kvdoctor.core.cite import Cite
from kvdoctor.core.config import ModelConfig
from kvdoctor.core.record import record
from kvdoctor.core.sglang import geometry, rules
from kvdoctor.core.sglang.families import Classification
from kvdoctor.core.sglang.flags import ServerFlags
from kvdoctor.core.sglang.policy import Platform, PoolLayout
from kvdoctor.core.sglang.sizing import mamba_strategy
from kvdoctor.core.sglang.spec import StateSpec


@record(frozen=True)
class Refusal:
    """One start-up refusal SGLang 0.5.23 would raise for this launch: its message and where it raises."""

    key: str  # the row of rules.REFUSALS
    message: str
    source: Cite

    @property
    def where(self) -> str:
        return self.source.where


def _refusal(key: str, **fields: object) -> Refusal:
    rule = rules.REFUSALS[key]
    return Refusal(key, rule.message.format(**fields), rule.source)


def _decode_radix_off(cfg: ModelConfig, flags: ServerFlags) -> bool:
    """SGLang runs this server with the radix cache off: asked to, a decode server without its radix
    opt-in (``rules.DECODE_RADIX_SOURCE``), or a model that forces it off (``RADIX_OFF_FAMILIES_SOURCE``)."""
    return (
        flags.disable_radix_cache
        or (flags.is_decode and not flags.disaggregation_decode_enable_radix_cache)
        or cfg.model_type in rules.RADIX_OFF_MODEL_TYPES
    )


def _flag_refusals(cfg: ModelConfig, flags: ServerFlags, cls: Classification) -> list[Refusal]:
    """Refusals of the argument stage: model overrides, handle_pd_disaggregation, handle_cache_compatibility."""
    found: list[Refusal] = []
    kv_dtype = flags.kv_cache_dtype
    hybrid_minicpm = cfg.model_type in rules.RADIX_OFF_MODEL_TYPES and cls.uses_ssm_state
    if hybrid_minicpm and flags.enable_hierarchical_cache:
        found.append(_refusal("minicpm_hicache"))
    if cls.is_dsa and kv_dtype not in rules.DSA_KV_DTYPES:
        found.append(_refusal("dsa_kv_dtype"))
    if cls.is_dsv4 and kv_dtype not in rules.DSV4_KV_DTYPES:
        found.append(_refusal("dsv4_kv_dtype", dtype=kv_dtype))
    if cfg.architecture in rules.IQUEST_Q1_ARCHS:
        backends = (flags.attention_backend, flags.prefill_attention_backend, flags.decode_attention_backend)
        if any(b not in (None, rules.IQUEST_Q1_BACKEND) for b in backends):
            found.append(_refusal("iquest_q1_backend"))
        if flags.attention_dp_size > 1:
            found.append(_refusal("iquest_q1_dp_attention"))
    explicit = flags.disaggregation_decode_retraction_backup
    if flags.disaggregation_decode_host_receive_threshold < 1 and explicit == "cpu_tensor":
        found.append(_refusal("receive_cpu_tensor"))
    host_pool = flags.retraction_backup_declared == "host_pool"
    preemption = flags.enable_priority_scheduling and not flags.disable_priority_preemption
    refused = [
        ("host_pool_not_decode", host_pool and not flags.is_decode),
        ("host_pool_dcp", host_pool and flags.dcp_enabled),
        ("host_pool_priority", host_pool and preemption),
        (
            "hicache_without_radix",
            flags.enable_hierarchical_cache and _decode_radix_off(cfg, flags) and not hybrid_minicpm,
        ),
        ("offload_not_decode", flags.disaggregation_decode_enable_offload_kvcache and not flags.is_decode),
        (
            "offload_no_storage",
            flags.disaggregation_decode_enable_offload_kvcache
            and flags.is_decode
            and flags.hicache_storage_backend is None,
        ),
        (
            "offload_host_pool",
            flags.disaggregation_decode_enable_offload_kvcache
            and flags.is_decode
            and flags.hicache_storage_backend is not None
            and host_pool,
        ),
    ]
    found += [_refusal(key) for key, hit in refused if hit]
    return found


def _model_refusals(cfg: ModelConfig, flags: ServerFlags, spec: StateSpec, derived_context: int) -> list[Refusal]:
    """Refusals of the model stage: the context length, and TP against the attention heads."""
    found: list[Refusal] = []
    if spec.classification.is_dsv4 and flags.disable_hybrid_swa_memory:
        found.append(_refusal("dsv4_no_hybrid_swa"))
    if flags.context_length is not None and flags.context_length > derived_context:
        found.append(_refusal("context_length", requested=flags.context_length, derived=derived_context))
    tp, heads = flags.attention_tp_size, cfg.get("num_attention_heads")
    attention = spec.full if spec.full is not None else spec.swa
    if tp > 1 and isinstance(heads, int) and attention is not None and not attention.mla:
        kv_heads = geometry.total_kv_heads(cfg)
        if heads % tp:
            found.append(_refusal("tp_heads", tp=tp, heads=heads))
        if (kv_heads >= tp and kv_heads % tp) or (kv_heads < tp and tp % kv_heads):
            found.append(_refusal("tp_kv_heads", tp=tp, heads=kv_heads))
    return found


def _mamba_radix_refusals(cfg: ModelConfig, flags: ServerFlags, spec: StateSpec, page_given: int) -> list[Refusal]:
    """handle_mamba_radix_cache: the strategy a server with its radix cache on resolves for recurrent state must
    suit the model (extra_buffer only where SGLang supports it) and the page size (no_buffer: pages of 1). The
    validator sees the page size as given (PAGE_GIVEN): a model's own page size is resolved after it runs."""
    if not (spec.classification.uses_ssm_state and set(spec.architectures) & rules.MAMBA_RADIX_CACHE_ARCHS):
        return []  # SGLang validates a strategy only for the architectures whose radix cache keeps Mamba checkpoints
    strategy = mamba_strategy(spec, flags, cfg.model_type)
    supported = bool(set(spec.architectures) & rules.MAMBA_EXTRA_BUFFER_ARCHS)
    if strategy in ("extra_buffer", "extra_buffer_lazy") and not supported:
        return [_refusal("mamba_extra_buffer_arch", arch=cfg.architecture)]
    if strategy == "no_buffer" and page_given > 1:
        return [_refusal("mamba_no_buffer_paged")]
    return []


def _decode_radix_refusals(cfg: ModelConfig, flags: ServerFlags, spec: StateSpec) -> list[Refusal]:
    """validate_decode_radix_cache: a decode server's radix opt-in on a hybrid-SWA model."""
    cls = spec.classification
    if not (flags.is_decode and flags.disaggregation_decode_enable_radix_cache and cls.is_hybrid_swa):
        return []
    if flags.enable_hierarchical_cache:
        return [_refusal("decode_radix_swa_hicache")]
    if cls.is_dsv4:  # kvdoctor models the default (non-unified) DeepSeek-V4 KV layout
        return [_refusal("decode_radix_dsv4")]
    if cfg.architecture in rules.SWA_COMPRESS_ARCHS:
        return [_refusal("decode_radix_swa_compress")]
    return []


def _tree_cache_refusals(flags: ServerFlags, spec: StateSpec, layout: PoolLayout, backend: str) -> list[Refusal]:
    """What create_unified_radix_cache and validate_retraction_host_capacity refuse for a host_pool
    retraction backup on a decode server (``rules.REFUSALS`` host_pool_*)."""
    if not (flags.is_decode and backend == "host_pool"):
        return []
    cls = spec.classification
    if cls.uses_ssm_state:
        return [_refusal("host_pool_mamba")]
    if cls.is_hybrid_swa and layout.kv_pool == "SWAKVPool" and spec.full is None:
        return [_refusal("host_pool_pure_swa")]
    if layout.kv_pool not in rules.HOST_POOL_LAYOUTS and layout.kv_pool != "SWAKVPool":
        return [_refusal("host_pool_layout")]
    return []


def launch_refusals(
    cfg: ModelConfig,
    flags: ServerFlags,
    spec: StateSpec,
    layout: PoolLayout,
    backend: str,
    derived_context: int,
    platform: Platform | None = None,
    page_given: int | None = None,
) -> tuple[Refusal, ...]:
    """Every start-up refusal SGLang 0.5.23 would raise for CFG under FLAGS, in the order it meets them.

    The one home for launch refusals: each becomes hazard KVD014 carrying SGLang's message and place,
    while the rest of the analysis is still shown (malformed input, by contrast, is exit 2 where it
    enters). SGLang stops at the first; kvdoctor lists each one that applies.
    """
    hopper = platform is not None and not platform.is_sm100
    platform_refusals = [_refusal("mxfp8_needs_blackwell")] if hopper and flags.kv_cache_dtype == "mxfp8" else []
    return (
        *platform_refusals,
        *_flag_refusals(cfg, flags, spec.classification),
        *_mamba_radix_refusals(cfg, flags, spec, flags.page_size if page_given is None else page_given),
        *_model_refusals(cfg, flags, spec, derived_context),
        *_decode_radix_refusals(cfg, flags, spec),
        *_tree_cache_refusals(flags, spec, layout, backend),
    )
