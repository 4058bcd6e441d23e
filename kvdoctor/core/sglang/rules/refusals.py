"""Launches SGLang 0.5.23 refuses at start-up (hazard KVD014): SGLang's own message and where it raises,
and the model context length the ``--context-length`` refusal compares against."""

from __future__ import annotations

from kvdoctor.core.cite import Cite
from kvdoctor.core.record import record
from kvdoctor.core.sglang.rules.backends import MXFP8_SM100_SOURCE
from kvdoctor.core.sglang.rules.citations import cite
from kvdoctor.core.sglang.rules.deepseek import DSA_KV_DTYPE_SOURCE, DSV4_KV_DTYPE_SOURCE


@record(frozen=True)
class RefusalRule:
    """A start-up refusal: SGLang's own message (``{}`` fields filled from the launch) and where."""

    message: str
    source: Cite


REFUSALS: dict[str, RefusalRule] = {
    # Not a message SGLang writes: with hybrid SWA off, _derive_pool_sizes leaves the full and SWA sizes
    # None and DeepSeekV4TokenToKVPool's constructor fails on them (a TypeError);
    # the server does not start, which is what KVD014 reports.
    "dsv4_no_hybrid_swa": RefusalRule(
        "DeepSeek-V4 with --disable-hybrid-swa-memory: the pool gets no full/SWA size (is_hybrid_swa is False) "
        "and SGLang fails building DeepSeekV4TokenToKVPool (TypeError): the server does not start.",
        cite("srt/mem_cache/kv_cache_configurator.py", "_derive_pool_sizes", 528, 535),
    ),
    # handle_mamba_radix_cache (arg_groups/model_hook.py) validates the resolved Mamba radix-cache strategy of a
    # server whose radix cache is on (auto resolves as sizing.mamba_slots_per_request restates).
    "mamba_extra_buffer_arch": RefusalRule(
        "extra_buffer is not supported for {arch}; use no_buffer.",
        cite("srt/arg_groups/mamba_hook.py", "validate_mamba_extra_buffer", 115, 119),
    ),
    "mamba_no_buffer_paged": RefusalRule(
        "no_buffer only supports page_size=1.",
        cite("srt/arg_groups/mamba_hook.py", "validate_mamba_no_buffer", 156, 157),
    ),
    # kv_cache_builder / registry / unified tree: what a host_pool retraction backup needs.
    "host_pool_mamba": RefusalRule(
        "Host-pool retraction does not support Mamba models.",
        cite("srt/mem_cache/registry.py", "Host-pool retraction does not support Mamba models", 156, 158),
    ),
    "host_pool_pure_swa": RefusalRule(
        "Host-pool retraction does not support pure-SWA models.",
        cite("srt/mem_cache/registry.py", "Host-pool retraction does not support pure-SWA models", 159, 160),
    ),
    "host_pool_layout": RefusalRule(
        "--disaggregation-decode-retraction-backup=host_pool requires an MHA or hybrid-SWA HiCache host stack.",
        cite("srt/mem_cache/unified_radix_cache.py", "validate_retraction_host_capacity", 1447, 1472),
    ),
    # handle_cache_compatibility (arg_groups/kv_cache_hook.py).
    "host_pool_not_decode": RefusalRule(
        "--disaggregation-decode-retraction-backup=host_pool is only supported on a PD decode server.",
        cite("srt/arg_groups/kv_cache_hook.py", "supported on a PD decode server", 353, 360),
    ),
    "host_pool_dcp": RefusalRule(
        "--disaggregation-decode-retraction-backup=host_pool does not support --dcp-size > 1.",
        cite("srt/arg_groups/kv_cache_hook.py", "dcp_size", 360, 364),
    ),
    "host_pool_priority": RefusalRule(
        "--disaggregation-decode-retraction-backup=host_pool requires --disable-priority-preemption when "
        "priority scheduling is enabled.",
        cite("srt/arg_groups/kv_cache_hook.py", "disable_priority_preemption", 365, 373),
    ),
    "hicache_without_radix": RefusalRule(
        "The arguments enable-hierarchical-cache and disable-radix-cache are mutually exclusive and cannot be "
        "used at the same time. Please use only one of them.",
        cite("srt/arg_groups/kv_cache_hook.py", "mutually exclusive", 393, 397),
    ),
    "offload_not_decode": RefusalRule(
        "The argument disaggregation-decode-enable-offload-kvcache is only supported for decode side.",
        cite("srt/arg_groups/kv_cache_hook.py", "only supported for decode side", 399, 403),
    ),
    "offload_no_storage": RefusalRule(
        "The argument disaggregation-decode-enable-offload-kvcache is only supported when hicache-storage-backend "
        "is provided.",
        cite("srt/arg_groups/kv_cache_hook.py", "hicache_storage_backend", 404, 407),
    ),
    "offload_host_pool": RefusalRule(
        "The arguments disaggregation-decode-enable-offload-kvcache and disaggregation-decode-retraction-backup="
        "host_pool are mutually exclusive: both build a decode host pool.",
        cite("srt/arg_groups/kv_cache_hook.py", "both build a decode host pool", 408, 413),
    ),
    # handle_pd_disaggregation (arg_groups/pd_disaggregation_hook.py).
    "receive_cpu_tensor": RefusalRule(
        "Decode host KV buffering requires host_pool retraction",
        cite("srt/arg_groups/pd_disaggregation_hook.py", "Decode host KV buffering requires host_pool", 75, 76),
    ),
    # _derive_context_length (configs/model_config.py).
    "context_length": RefusalRule(
        "User-specified context_length ({requested}) is greater than the derived context_length ({derived}). "
        "To allow overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
        cite("srt/configs/model_config.py", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", 1295, 1316),
    ),
    # Every attention layer asserts TP divides the heads, and divides or is divided by the KV heads.
    "tp_heads": RefusalRule(
        "--tp-size {tp} with {heads} attention heads: assert total_num_heads % tp_size == 0",
        cite("srt/models/llama.py", "total_num_heads", 182, 183),
    ),
    "tp_kv_heads": RefusalRule(
        "--tp-size {tp} with {heads} KV heads: the tensor-parallel size must divide the KV heads or the KV heads "
        "divide it",
        cite("srt/models/llama.py", "total_num_kv_heads", 185, 193),
    ),
    # KV dtypes the DeepSeek sparse-attention families refuse (MXFP8 among them, FA4 or not).
    "mxfp8_needs_blackwell": RefusalRule(
        "--kv-cache-dtype mxfp8 requires an SM100+ (Blackwell) GPU for the block-scaled operands used by the "
        "FA4 MXFP8 attention path.",
        MXFP8_SM100_SOURCE,
    ),
    "dsa_kv_dtype": RefusalRule(
        "DeepSeek DSA only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype", DSA_KV_DTYPE_SOURCE
    ),
    "dsv4_kv_dtype": RefusalRule("{dtype} is not supported for DeepseekV4ForCausalLM", DSV4_KV_DTYPE_SOURCE),
    # validate_decode_radix_cache: the decode-side radix cache on a hybrid-SWA pool.
    "decode_radix_swa_hicache": RefusalRule(
        "--disaggregation-decode-enable-radix-cache with sliding window attention (SWA) models currently supports "
        "only device-resident cache and is incompatible with --enable-hierarchical-cache.",
        cite("srt/mem_cache/kv_cache_builder.py", "enable_hierarchical_cache", 283, 289),
    ),
    "decode_radix_dsv4": RefusalRule(
        "--disaggregation-decode-enable-radix-cache with DeepSeek-V4 requires the unified KV layout "
        "(SGLANG_HACK_FLASHMLA_BACKEND=unified_kv_triton).",
        cite("srt/mem_cache/kv_cache_builder.py", "is_deepseek_v4_arch", 293, 300),
    ),
    "decode_radix_swa_compress": RefusalRule(
        "--disaggregation-decode-enable-radix-cache does not support SWA-compress models (e.g. Gemma4 / MiMo-V2) yet.",
        cite("srt/mem_cache/kv_cache_builder.py", "is_hybrid_swa_compress", 301, 305),
    ),
    # _iquest_q1_overrides (arg_groups/model_overrides/iquest_q1.py): FA3 only, no DP attention.
    "iquest_q1_backend": RefusalRule(
        "IQuestQ1 applies its attention sink from the softmax LSE and requires FA3 attention for both prefill and "
        "decode.",
        cite("srt/arg_groups/model_overrides/iquest_q1.py", "requires FA3 attention", 19, 23),
    ),
    "iquest_q1_dp_attention": RefusalRule(
        "IQuest Q1 does not support DP attention.",
        cite("srt/arg_groups/model_overrides/iquest_q1.py", "IQuest Q1 does not support DP attention", 37, 38),
    ),
    # MiniCPM-SALA's hybrid (sparse / lightning) attention has no hierarchical cache.
    "minicpm_hicache": RefusalRule(
        "MiniCPM SALA does not support hierarchical cache",
        cite("srt/arg_groups/model_overrides/minicpm.py", "MiniCPM SALA does not support hierarchical cache", 24, 26),
    ),
}
# The model's context length: the first of these fields set, times a rope_scaling factor (1 under
# original_max_position_embeddings or llama3 rope), else 2048.
CONTEXT_LENGTH_KEYS = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)
CONTEXT_LENGTH_SOURCE = cite("srt/utils/hf_transformers/common.py", "get_context_length", 668, 694)
CONTEXT_LENGTH_FALLBACK = 2048
