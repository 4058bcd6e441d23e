"""Which SGLang family a model belongs to: the recurrent-state predicates of ``srt/configs/hybrid_arch.py``,
the model_type → family table, the attention-only model types and how SGLang loads a config."""

from __future__ import annotations

from kvdoctor.core.cite import Source
from kvdoctor.core.record import record
from kvdoctor.core.sglang.rules.citations import cite
from kvdoctor.core.sglang.rules.layers import (
    GIGACHAT_LAYERS_SOURCE,
    GLM5_KDA_NUMBERING_SOURCE,
    GRANITE_ALIASES_SOURCE,
    GRANITE_DEFAULT_SOURCE,
    GRANITE_LAYER_KINDS_SOURCE,
    INKLING_DTYPE_SOURCE,
    JET_LAYER_KINDS_SOURCE,
    KIMI_KDA_NUMBERING_SOURCE,
    LFM2_LAYER_KINDS_SOURCE,
    MAMBA2_SHAPE_SOURCE,
    MINICPM_ALIASES_SOURCE,
    MINICPM_TILE_SOURCE,
    NEMOTRON_H_BLOCKS_SOURCE,
)

HYBRID_GDN = cite("srt/configs/hybrid_arch.py", "hybrid_gdn_config", 55, 67)
MAMBA2_CONFIG = cite("srt/configs/hybrid_arch.py", "mamba2_config", 70, 108)
KIMI_LINEAR_CONFIG = cite("srt/configs/hybrid_arch.py", "kimi_linear_config", 111, 123)
LIGHTNING_CONFIG = cite("srt/configs/hybrid_arch.py", "hybrid_lightning_config", 46, 52)
USES_SSM_STATE = cite("srt/mem_cache/kv_cache_builder.py", "uses_ssm_state", 173, 183)


@record(frozen=True)
class FamilyRule:
    """One row of the model_type → family table.

    ``predicate`` is the SGLang helper that recognises the config class registered for these
    model types; ``condition`` names an extra field test the helper applies (see ``CONDITIONS``
    in ``families.py``); ``on_text_config`` says whether SGLang checks the unwrapped text config.
    ``source`` cites the predicate and, where the family has its own, how SGLang's config class reads
    its layers (kinds, aliases, defaults, numbering): ``inspect`` shows it as the model's rule source.
    """

    family: str
    model_types: tuple[str, ...]
    predicate: str
    source: Source
    condition: str | None = None
    on_text_config: bool = False


FAMILY_RULES: tuple[FamilyRule, ...] = (
    FamilyRule(
        "gdn",
        ("qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text", "intern_s2_preview"),
        "hybrid_gdn_config",
        HYBRID_GDN,
        on_text_config=True,
    ),
    # Their text configs subclass Qwen3-Next / Qwen3.5-MoE's, so the isinstance test sees GDN state.
    FamilyRule(
        "gdn",
        ("qwen4_exp", "qwen4_exp_text"),
        "hybrid_gdn_config",
        (HYBRID_GDN, cite("srt/configs/qwen4_exp.py", "Qwen4ExpTextConfig", 15)),
        on_text_config=True,
    ),
    FamilyRule(
        "gdn",
        ("interns2_mobius", "interns2_mobius_text"),
        "hybrid_gdn_config",
        (HYBRID_GDN, cite("srt/configs/interns2_mobius.py", "InternS2MobiusTextConfig", 17)),
        on_text_config=True,
    ),
    FamilyRule(
        "jet_gdn",
        ("jet_nemotron", "jet_vlm"),
        "hybrid_gdn_config",
        (HYBRID_GDN, JET_LAYER_KINDS_SOURCE),
        on_text_config=True,
    ),
    FamilyRule(
        "inkling",
        ("inkling_mm_model", "inkling_model"),
        "mamba2_config",
        (cite("srt/configs/hybrid_arch.py", "mamba2_cache_params", 91, 95), INKLING_DTYPE_SOURCE),
    ),
    FamilyRule(
        "nemotron_h",
        (
            "nemotron_h",
            "nemotron_h_puzzle",
            "NemotronH_Nano_VL_V2",
            "NemotronH_Nano_Omni_Reasoning_V3",
            "nemotron_h_omni",
        ),
        "mamba2_config",
        (MAMBA2_CONFIG, MAMBA2_SHAPE_SOURCE, NEMOTRON_H_BLOCKS_SOURCE),
        condition="draft_pattern_has_mamba",
    ),
    FamilyRule("falcon_h1", ("falcon_h1",), "mamba2_config", (MAMBA2_CONFIG, MAMBA2_SHAPE_SOURCE)),
    FamilyRule("lfm2", ("lfm2", "lfm2_moe", "lfm2_vl"), "mamba2_config", (MAMBA2_CONFIG, LFM2_LAYER_KINDS_SOURCE)),
    FamilyRule(
        "granite_hybrid",
        ("granitemoehybrid",),
        "mamba2_config",
        (
            cite("srt/configs/hybrid_arch.py", "GraniteMoeHybridConfig", 99, 106),
            MAMBA2_SHAPE_SOURCE,
            GRANITE_LAYER_KINDS_SOURCE,
            GRANITE_ALIASES_SOURCE,
            GRANITE_DEFAULT_SOURCE,
        ),
        condition="any_layer_is_mamba",
    ),
    FamilyRule("zaya", ("zaya",), "mamba2_config", (MAMBA2_CONFIG, MAMBA2_SHAPE_SOURCE)),
    FamilyRule("mamba2", ("mamba2",), "mamba2_config", (MAMBA2_CONFIG, MAMBA2_SHAPE_SOURCE)),
    FamilyRule("mamba1", ("mamba", "falcon_mamba"), "mamba2_config", MAMBA2_CONFIG),
    FamilyRule("kda", ("kimi_linear",), "kimi_linear_config", (KIMI_LINEAR_CONFIG, KIMI_KDA_NUMBERING_SOURCE)),
    FamilyRule(
        "kda",
        ("kimi_k3",),
        "kimi_linear_config",
        (
            cite("srt/configs/hybrid_arch.py", "KimiLinearConfig", 120, 122),
            cite("srt/configs/kimi_k3.py", "KimiLinearConfig", 80, 95),
            KIMI_KDA_NUMBERING_SOURCE,
        ),
    ),
    FamilyRule("kda", ("bailing_hybrid",), "kimi_linear_config", KIMI_LINEAR_CONFIG, condition="bailing_uses_kda"),
    # A Bailing-MoE-V3-VL whose text_config is a KDA BailingHybridConfig (the unwrapped text config).
    FamilyRule(
        "kda",
        ("bailing_moe_v3_vl",),
        "kimi_linear_config",
        (
            cite("srt/configs/hybrid_arch.py", "BailingHybridConfig", 117, 119),
            cite("srt/configs/bailing_hybrid.py", "BailingHybridConfig", 263, 264),
        ),
        condition="bailing_uses_kda",
        on_text_config=True,
    ),
    FamilyRule(
        "lightning", ("bailing_hybrid",), "hybrid_lightning_config", LIGHTNING_CONFIG, condition="bailing_not_kda"
    ),
    FamilyRule(
        "lightning",
        ("minicpm_sala",),
        "hybrid_lightning_config",
        (LIGHTNING_CONFIG, MINICPM_ALIASES_SOURCE, MINICPM_TILE_SOURCE),
        condition="has_lightning_layers",
    ),
    FamilyRule(
        "glm5_next",
        ("glm5_next",),
        "glm5_next_config",
        (cite("srt/configs/hybrid_arch.py", "glm5_next_config", 126, 133), GLM5_KDA_NUMBERING_SOURCE),
    ),
    FamilyRule(
        "gdn",
        ("gigachat3_5",),
        "linear_attn_model_spec",
        (cite("srt/configs/gigachat35.py", "uses_mamba_radix_cache", 241, 252), GIGACHAT_LAYERS_SOURCE),
    ),
)

# Model types SGLang knows that carry attention KV only (matched when no FAMILY_RULES row applies).
ATTENTION_ONLY_MODEL_TYPES: frozenset[str] = frozenset(
    {
        "llama",
        "llama4",
        "llama4_text",
        "mistral",
        "mixtral",
        "qwen",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3_text",
        "gemma4",
        "gemma4_text",
        "gpt_oss",
        "deepseek_v2",
        "deepseek_v3",
        "deepseek_v32",
        "deepseek_v4",
        "kimi_k2",
        "minicpm",
        "minicpm3",
        "phi3",
        "glm4",
        "glm4_moe",
        "olmo2",
        "exaone",
        "granite",
        "granitemoe",
        "step3p5",
        "mimo_v2_flash",
        "beam",
        "longcat_flash",
    }
)
ATTENTION_ONLY_SOURCE = cite("srt/utils/hf_transformers/common.py", "_CONFIG_REGISTRY", 117, 191)
# An architecture SGLang does not register runs on its Transformers backend (appended as the fallback),
# when transformers has a causal-LM class for the model type (data in transformers_causal_lm.py).
TRANSFORMERS_FALLBACK = cite("srt/models/registry.py", "TransformersForCausalLM", 74, 91)
# get_config builds the config with AutoConfig.from_pretrained (after registering _CONFIG_REGISTRY), which
# raises on a model_type it does not know (the names: sglang_model_types.py); a LongCat architecture is
# loaded by its own class first, whatever its model_type.
CONFIG_LOADER_SOURCE = cite("srt/utils/hf_transformers/config.py", "AutoConfig.from_pretrained", 228, 233)
LONGCAT_LOADER_SOURCE = cite("srt/utils/hf_transformers/config.py", "_LONGCAT_ARCHS", 154, 171)
LONGCAT_LOADER_ARCHS = frozenset({"LongcatCausalLM", "LongcatFlashForCausalLM", "LongcatFlashNgramForCausalLM"})
