"""Hybrid SWA and MLA (``srt/configs/model_config.py``): which architectures run which attention pools,
how their sliding layers are found, and how KV heads and shapes are read."""

from __future__ import annotations

from kvdoctor.core.sglang.rules.citations import cite
from kvdoctor.core.sglang.rules.layers import STEP_LAYER_TYPES_SOURCE

# is_hybrid_swa_model. Gemma 2/3 are absent: they run on the plain MHA pool with a window.
HYBRID_SWA_ARCHS: frozenset[str] = frozenset(
    {
        "BeamForCausalLM",
        "Llama4ForConditionalGeneration",
        "DeepseekV4ForCausalLM",
        "DeepseekV4ForCausalLMNextN",
        "DeepseekV4ForCausalLMDSpark",
        "GptOssForCausalLM",
        "GraniteSWAForCausalLM",
        "GraniteMoeSWAForCausalLM",
        "IQuestQ1ForCausalLM",
        "IQuestQ1MTP",
        "MiMoV2ForCausalLM",
        "MiMoV2FlashForCausalLM",
        "MiMoV2MTP",
        "Step3p5ForCausalLM",
        "Step3p5MTP",
        "Step3p7ForConditionalGeneration",
        "Gemma4ForCausalLM",
        "Gemma4ForConditionalGeneration",
        "EmbeddingGemma2Model",
        "Gemma4UnifiedForConditionalGeneration",
        "DiffusionGemmaForBlockDiffusion",
        "LagunaForCausalLM",
        "MellumForCausalLM",
        "MuseGlimmerForCausalLM",
        "MuseGlimmerForConditionalGeneration",
        "InklingForConditionalGeneration",
        "InklingForConditionalGenerationMTP",
        "UnlimitedOCRForCausalLM",
    }
)

# Hybrid-SWA models whose sliding layers compress their KV (is_hybrid_swa_compress, by architectures[0]).
SWA_COMPRESS_ARCHS = frozenset(
    {
        "MiMoV2ForCausalLM",
        "MiMoV2FlashForCausalLM",
        "MiMoV2MTP",
        "Gemma4ForCausalLM",
        "Gemma4ForConditionalGeneration",
        "EmbeddingGemma2Model",
        "InklingForConditionalGeneration",
        "InklingForConditionalGenerationMTP",
        "Gemma4UnifiedForConditionalGeneration",
        "DiffusionGemmaForBlockDiffusion",
    }
)
SWA_COMPRESS_SOURCE = cite("srt/configs/model_config.py", "is_hybrid_swa_compress", 1246, 1256)

# How each hybrid-SWA architecture names its sliding layers (get_hybrid_layer_ids).
SWA_LAYER_RULES_SOURCE = cite("srt/configs/model_config.py", "get_hybrid_layer_ids", 2700, 2826)
SWA_LAYER_RULES: dict[str, str] = {
    "Llama4ForConditionalGeneration": "every_fourth_full",
    "InklingForConditionalGeneration": "local_layer_ids",
    "MiMoV2ForCausalLM": "hybrid_layer_pattern",
    "MiMoV2FlashForCausalLM": "hybrid_layer_pattern",
    "MiMoV2MTP": "first_layer_swa",
    "Step3p5MTP": "first_layer_swa",
    "UnlimitedOCRForCausalLM": "all_swa",
}
# Everything else lists "sliding_attention" / "full_attention" in layer_types (gpt-oss, Gemma 4,
# Step 3.5, …; entries past num_hidden_layers ignored), unless it opts in with a
# hybrid_layer_pattern (1 = SWA, 0 = full), the generic fallback.
SWA_LAYER_DEFAULT_RULE = "layer_types"
# A hybrid-SWA classification's rule source: the predicate, then how its sliding layers are found
# and whether they compress.
HYBRID_SWA_SOURCE = (
    cite("srt/configs/model_config.py", "is_hybrid_swa_model", 2651, 2696),
    cite("srt/configs/model_config.py", "SWA_SINK_ARCHS", 88, 96),
    cite("srt/configs/model_config.py", "_derive_hybrid_model", 1213, 1218),
    SWA_LAYER_RULES_SOURCE,
    STEP_LAYER_TYPES_SOURCE,
    SWA_COMPRESS_SOURCE,
)

# attention_arch = MLA by architecture name.
MLA_ARCHS: frozenset[str] = frozenset(
    {
        "DeepseekV2ForCausalLM",
        "DeepseekV32ForCausalLM",
        "DeepseekV3ForCausalLM",
        "DeepseekV3ForCausalLMNextN",
        "Glm4MoeLiteForCausalLM",
        "GlmMoeDsaForCausalLM",
        "Glm5NextForConditionalGeneration",
        "LongcatFlashForCausalLM",
        "HYV4ForCausalLM",
        "DotsVLMForCausalLM",
        "Dots3NoteForCausalLM",
        "MistralLarge3ForCausalLM",
        "KimiK25ForConditionalGeneration",
        "GigaChat35ForCausalLM",
        "MiniCPM3ForCausalLM",
        "DeepseekVL2ForCausalLM",
        "KimiVLForConditionalGeneration",
        "KimiLinearForCausalLM",
        "KimiK3LinearForCausalLM",
        "KimiK3ForConditionalGeneration",
        "BailingMoeV2_5ForCausalLM",
        "BailingMoeV3ForCausalLM",
        "BailingMoeV3VLForConditionalGeneration",
        "SarvamMLAForCausalLM",
    }
)
MLA_SOURCE = cite("srt/configs/model_config.py", "AttentionArch", 1366, 1515)

# KV heads: the first of these text-config fields that is set (Step 3 spells them num_attention_groups).
KV_HEAD_KEYS = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num", "num_attention_groups")
KV_HEAD_KEYS_SOURCE = cite("srt/configs/model_config.py", "num_attention_groups", 1669, 1681)
# Gemma 4 states its shapes SWA-first: full-attention layers take global_head_dim (default 512) and,
# with attention_k_eq_v, num_global_key_value_heads; sliding layers keep head_dim / num_key_value_heads.
GEMMA4_SHAPES_SOURCE = cite("srt/utils/hf_transformers/config.py", "_apply_gemma4_attention_overrides", 115, 148)
GEMMA4_GLOBAL_HEAD_DIM_DEFAULT = 512
