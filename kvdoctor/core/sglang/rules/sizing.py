"""Pool sizing (``srt/mem_cache/kv_cache_configurator.py``): the ratio fallbacks and model overrides, and
the mamba slots a running request takes."""

from __future__ import annotations

from kvdoctor.core.sglang.rules.citations import cite
from kvdoctor.core.sglang.rules.deepseek import DSV4_OVERRIDES_SOURCE

SIZING_SOURCE = (
    cite("srt/mem_cache/kv_cache_configurator.py", "max_mamba_cache_size", 3229, 3410),
    cite("srt/model_executor/pool_configurator.py", "swa_full_tokens_ratio", 656, 921),
)
# Fallbacks of the two ratio flags when nothing overrides them.
RATIO_FALLBACK_SOURCE = cite("srt/arg_groups/fields/schedule.py", "swa_full_tokens_ratio", 150, 227)
SWA_FULL_TOKENS_RATIO_FALLBACK = 0.8
MAMBA_FULL_MEMORY_RATIO_FALLBACK = 0.9
# Model overrides applied when the user leaves a knob unset (arg_groups/model_overrides/*.py).
RATIO_OVERRIDES: dict[str, dict[str, float]] = {
    "inkling": {"swa_full_tokens_ratio": 0.1, "mamba_full_memory_ratio": 0.1},
    "dsv4": {"swa_full_tokens_ratio": 0.1},
}
RATIO_OVERRIDES_SOURCE = (
    cite("srt/arg_groups/model_overrides/inkling.py", "swa_full_tokens_ratio", 41, 44),
    DSV4_OVERRIDES_SOURCE,
)
# Step 3.5 / 3.7 under hierarchical cache: the SWA ratio becomes 1.0 and hybrid SWA is switched off.
STEP_HICACHE_SOURCE = cite("srt/arg_groups/overrides.py", "disable_hybrid_swa_memory", 351, 359)
STEP_HICACHE_ARCHS = frozenset({"Step3p5ForCausalLM", "Step3p7ForConditionalGeneration"})
STEP_HICACHE_SWA_RATIO = 1.0
# --max-mamba-cache-size is split over the attention data-parallel shards.
MAMBA_CACHE_PER_SHARD_SOURCE = cite("srt/mem_cache/kv_cache_configurator.py", "per_dp_shard", 3303, 3308)
ATTN_DP_SOURCE = cite("srt/arg_groups/parallel_hook.py", "attn_dp_size", 50, 57)
# Mamba slots per running request: 1 with the radix cache off (a PD decode server without its radix
# opt-in); otherwise 3, plus the tracking slots of the extra buffer (2 with the overlap schedule, 1 when lazy).
# The strategy's resolution (MAMBA_EXTRA_BUFFER_ARCHS, MAMBA_RADIX_CACHE_ARCHS, FORCED_MAMBA_STRATEGY below) is
# cited here too.
MAMBA_SLOTS_SOURCE = (
    cite("srt/mem_cache/kv_cache_configurator.py", "_calculate_mamba_ratio", 3062, 3088),
    cite("srt/mem_cache/allocation_sizing.py", "get_mamba_tracking_slots", 11, 19),
    cite("srt/arg_groups/overrides.py", "_MAMBA_EXTRA_BUFFER_ARCHS", 401, 486),
    cite("srt/arg_groups/model_overrides/inkling.py", "extra_buffer", 50, 56),
    cite("srt/arg_groups/overrides.py", "_MAMBA_RADIX_CACHE_ARCHS", 369, 399),
    cite("srt/arg_groups/overrides.py", "_mamba_radix_cache_resolution", 454, 466),
    cite("srt/arg_groups/model_overrides/inkling.py", "uses_mamba_radix_cache", 60, 60),
)
MAMBA_SLOTS_RADIX_OFF = 1
MAMBA_SLOTS_RADIX_BASE = 3
MAMBA_TRACKING_SLOTS = {"extra_buffer": 2, "extra_buffer_lazy": 1}
MAMBA_TRACKING_SLOTS_NO_OVERLAP = 1  # extra_buffer with --disable-overlap-schedule
# MiniCPM-SALA's hybrid attention forces the radix cache off (so one mamba slot per request).
RADIX_OFF_FAMILIES_SOURCE = cite("srt/arg_groups/model_overrides/minicpm.py", "disable_radix_cache", 24, 27)
RADIX_OFF_MODEL_TYPES = frozenset({"minicpm_sala"})
# --mamba-radix-cache-strategy auto resolves to extra_buffer for these architectures when the overlap
# schedule is on or pages are larger than 1, else no_buffer.
MAMBA_EXTRA_BUFFER_ARCHS = frozenset(
    {
        "KimiLinearForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3_5MoeForCausalLM",
        "Qwen3_5ForCausalLM",
        "Qwen3NextForCausalLM",
        "Qwen4ExpForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration",
        "MiniCPMV4_6ForConditionalGeneration",
        "MiniCPMV4_7ForConditionalGeneration",
        "BailingMoeV2_5ForCausalLM",
        "BailingMoeV3ForCausalLM",
        "BailingMoeV3VLForConditionalGeneration",
        "FalconH1ForCausalLM",
        "GraniteMoeHybridForCausalLM",
        "Glm5NextForConditionalGeneration",
        "NemotronHForCausalLM",
        "NemotronHPuzzleForCausalLM",
        "NemotronH_Omni_Reasoning_V3",
        "KimiK3ForConditionalGeneration",
        "InklingForConditionalGeneration",
        "InklingForConditionalGenerationMTP",
    }
)
# The architectures whose radix cache keeps Mamba checkpoints (SGLang resolves and validates a Mamba radix-cache
# strategy for these alone; GraniteMoeHybrid only with mamba layers; Inkling through its model override). A pure
# Mamba model (FalconMamba, Mamba2) is not among them. Cited in MAMBA_SLOTS_SOURCE, beside the resolution.
MAMBA_RADIX_CACHE_ARCHS = frozenset(
    {
        "KimiLinearForCausalLM",
        "KimiK3ForConditionalGeneration",
        "BailingMoeV2_5ForCausalLM",
        "BailingMoeV3ForCausalLM",
        "BailingMoeV3VLForConditionalGeneration",
        "Qwen3NextForCausalLM",
        "Qwen3_5MoeForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration",
        "InternS2MobiusForConditionalGeneration",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForCausalLM",
        "Qwen3_5ForCausalLM",
        "Qwen4ExpForConditionalGeneration",
        "MiniCPMV4_6ForConditionalGeneration",
        "MiniCPMV4_7ForConditionalGeneration",
        "NemotronHForCausalLM",
        "NemotronHPuzzleForCausalLM",
        "NemotronH_Omni_Reasoning_V3",
        "FalconH1ForCausalLM",
        "JetNemotronForCausalLM",
        "JetVLMForConditionalGeneration",
        "Lfm2ForCausalLM",
        "Lfm2MoeForCausalLM",
        "ZayaForCausalLM",
        "Glm5NextForConditionalGeneration",
        "GraniteMoeHybridForCausalLM",
        "InklingForConditionalGeneration",
        "InklingForConditionalGenerationMTP",
    }
)
# Inkling pins extra_buffer whatever the page size or overlap schedule (unless a strategy is given).
FORCED_MAMBA_STRATEGY = {
    "InklingForConditionalGeneration": "extra_buffer",
    "InklingForConditionalGenerationMTP": "extra_buffer",
}
