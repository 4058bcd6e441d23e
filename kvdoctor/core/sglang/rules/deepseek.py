"""DeepSeek sparse attention (DSA: DeepSeek-V3.2, GLM-5) and DeepSeek-V4: their pools, pages and KV dtypes."""

from __future__ import annotations

from kvdoctor.core.sglang.rules.citations import cite

# is_deepseek_dsa: one of these architectures with index_topk set.
DSA_ARCHS: frozenset[str] = frozenset(
    {
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "DeepseekV3ForCausalLMNextN",
        "MistralLarge3ForCausalLM",
        "PixtralForConditionalGeneration",
        "GlmMoeDsaForCausalLM",
        "GlmMoeDsaForCausalLMNextN",
        "Glm5NextForConditionalGenerationNextN",
        "Glm5NextForConditionalGeneration",
        "LongcatFlashForCausalLM",
        "LongcatFlashForCausalLMNextN",
        "Dots3NoteForCausalLM",
        "Dots3NoteForCausalLMNextN",
        "HYV4ForCausalLM",
        "HYV4ForCausalLMNextN",
    }
)
DSA_SOURCE = cite("srt/configs/model_config.py", "is_deepseek_dsa", 191, 212)
DSA_POOL = "DSATokenToKVPool"
DSA_POOL_SOURCE = cite("srt/mem_cache/kv_cache_configurator.py", "_build_dsa_kv_pool", 1866, 1871)
# On CUDA a DSA page holds 64 index-key tokens per pooled index group.
DSA_PAGE_SOURCE = cite("srt/arg_groups/model_overrides/deepseek_v2.py", "page_size", 169, 171)
DSA_PAGE_PER_KPOOL = 64
# The indexer's key cache beside the latent rows: index_head_dim fp8 bytes plus a float32 scale per
# 128, per token per layer (index_kpool tokens share one row).
DSA_INDEX_K_SOURCE = cite("srt/mem_cache/index_key_cache.py", "_buffer_shape", 39, 46)
DSA_INDEX_SCALE_BLOCK = 128
DSA_INDEX_SCALE_BYTES = 4
# PD: a DSATokenToKVPool registers DSA (its index cache), then DSA_TAIL when the pooled tail compresses.
DSA_PD_SOURCE = cite("srt/disaggregation/utils.py", "DSATokenToKVPool", 1702, 1736)
# DSA on SGLang's CUDA path defaults its KV dtype by GPU generation (kvdoctor models the SM90 default,
# bfloat16) and accepts only bfloat16 / fp8_e4m3.
DSA_KV_DTYPE_SOURCE = cite("srt/arg_groups/overrides.py", "_dsa_kv_cache_dtype_default", 490, 547)
DSA_KV_DTYPES = frozenset({"auto", "bf16", "bfloat16", "fp8_e4m3"})

DSV4_ARCHS = frozenset({"DeepseekV4ForCausalLM", "DeepseekV4ForCausalLMNextN", "DeepseekV4ForCausalLMDSpark"})
DSV4_SOURCE = cite("srt/configs/model_config.py", "is_deepseek_v4", 395, 400)
# DeepSeek-V4 builds its own pool (not an SWAKVPool): a sliding-window ring over every layer plus the
# compressed (c4 / c128) caches and per-request compressor state.
DSV4_POOL = "DeepSeekV4TokenToKVPool"
DSV4_SWA_POOL = "DeepSeekV4SingleKVPool"
DSV4_POOL_SOURCE = cite("srt/mem_cache/kv_cache_configurator.py", "is_dsv4_model", 1821, 1834)
# Its model override: swa_full_tokens_ratio 0.1 when unset, page 256 on CUDA.
DSV4_OVERRIDES_SOURCE = cite("srt/arg_groups/model_overrides/deepseek_v4.py", "swa_full_tokens_ratio", 45, 61)
DSV4_PAGE_SIZE = 256
# Its KV dtype: auto resolves to fp8_e4m3; only fp8_e4m3 / bfloat16 are accepted.
DSV4_KV_DTYPE_SOURCE = cite("srt/arg_groups/overrides.py", "_deepseek_v4_kv_cache_dtype", 892, 913)
DSV4_KV_DTYPE_AUTO = "fp8_e4m3"
DSV4_KV_DTYPES = frozenset({"auto", "fp8_e4m3", "bf16", "bfloat16"})
# PD: a BaseSWAKVPool registers SWA, then the request-scoped compressor state.
DSV4_PD_SOURCE = cite("srt/disaggregation/utils.py", "DSV4_REQUEST_STATE", 1547, 1600)
