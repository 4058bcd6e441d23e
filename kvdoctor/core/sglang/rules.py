"""The SGLang rules kvdoctor models: one table-like module, one home for every rule.

Each entry restates (never copies) a rule of SGLang's own source at ``RULES_REVISION`` and cites it
with :func:`cite`: a file inside the ``sglang`` package of the wheel (``pip download --no-deps
sglang==0.5.23``), a symbol that file names within the cited lines, and the lines. The citations are
data (:data:`CITATIONS`), so a test in the engine suite (``tests/engines/test_sglang_citations.py``)
opens every cited range in the installed SGLang and checks the symbol is there: when SGLang moves,
one module is re-checked, by a machine. Everything else in ``kvdoctor.core`` evaluates these tables;
none of it holds a rule of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

RULES_REVISION = "sglang==0.5.23 (retraction semantics of PR #35840, MXFP8 CPU offload of #35888)"


# --- Citations ---


@dataclass(frozen=True)
class Cite:
    """A range of SGLang's source that a rule restates.

    ``path`` is relative to the ``sglang`` package (``srt/mem_cache/kv_cache_builder.py``);
    ``symbol`` is a name (function, class, constant, field) or a short message fragment that appears
    within lines ``start``..``end`` of that file; the citation test checks exactly that.
    """

    path: str
    symbol: str
    start: int
    end: int

    @property
    def lines(self) -> str:
        return str(self.start) if self.start == self.end else f"{self.start}-{self.end}"

    def __str__(self) -> str:
        return f"{self.path}:{self.lines} ({self.symbol})"

    @property
    def where(self) -> str:
        """``sglang/<path>:<lines>``: the file and lines as a person opens them in the installed SGLang."""
        return f"sglang/{self.path}:{self.lines}"


CITATIONS: list[Cite] = []
Source = Cite | tuple[Cite, ...]


def cite(path: str, symbol: str, start: int, end: int | None = None) -> Cite:
    """Record and return a citation of SGLang's ``path`` (inside the package), lines start..end."""
    citation = Cite(path, symbol, start, start if end is None else end)
    CITATIONS.append(citation)
    return citation


def shown(source: Source) -> str:
    """One or more citations as people read them, joined by "; "."""
    return "; ".join(str(c) for c in (source if isinstance(source, tuple) else (source,)))


def located(source: Source) -> str:
    """One or more citations as the files and lines a person opens (``Cite.where``), joined by "; "."""
    return "; ".join(c.where for c in (source if isinstance(source, tuple) else (source,)))


# --- Recurrent-state predicates: srt/configs/hybrid_arch.py and kv_cache_builder.uses_ssm_state ---

HYBRID_GDN = cite("srt/configs/hybrid_arch.py", "hybrid_gdn_config", 55, 67)
MAMBA2_CONFIG = cite("srt/configs/hybrid_arch.py", "mamba2_config", 70, 108)
KIMI_LINEAR_CONFIG = cite("srt/configs/hybrid_arch.py", "kimi_linear_config", 111, 123)
LIGHTNING_CONFIG = cite("srt/configs/hybrid_arch.py", "hybrid_lightning_config", 46, 52)
USES_SSM_STATE = cite("srt/mem_cache/kv_cache_builder.py", "uses_ssm_state", 173, 183)


# --- Config normalisations SGLang's config classes apply before any rule reads them ---
# Transformers >= 5.15 spellings of GraniteMoeHybrid layer kinds, and its default pattern.
GRANITE_ALIASES_SOURCE = cite("srt/configs/granitemoehybrid.py", "aliases", 29, 32)
GRANITE_LAYER_ALIASES = {"linear_attention": "mamba", "full_attention": "attention"}
GRANITE_DEFAULT_SOURCE = cite("srt/configs/granitemoehybrid.py", "layer_types", 185, 193)
GRANITE_DEFAULT_ATTENTION_EVERY = 6
MINICPM_ALIASES_SOURCE = cite("srt/configs/minicpm.py", "_MIXER_TYPE_ALIASES", 6, 15)
MINICPM_MIXER_ALIASES = {
    "minicpm4": "minicpm4",
    "minicpm": "minicpm4",
    "standard": "minicpm4",
    "attention": "minicpm4",
    "attn": "minicpm4",
    "lightning": "lightning-attn",
    "lightning_attn": "lightning-attn",
    "lightning-attn": "lightning-attn",
}
MINICPM_TILE_SOURCE = cite("srt/configs/minicpm.py", "mixer_types", 93, 104)
LIGHTNING_MIXER = "lightning-attn"
# The per-layer kinds each reader counts; SGLang silently drops a layer of any other name, so kvdoctor
# refuses it (layer_types.py). Each reader is cited on its family's FAMILY_RULES row; the hybrid-SWA
# kinds are read by get_hybrid_layer_ids (SWA_LAYER_RULES_SOURCE).
GRANITE_LAYER_KINDS_SOURCE = cite("srt/configs/granitemoehybrid.py", "layer_types", 197, 209)
LFM2_LAYER_KINDS_SOURCE = cite("srt/configs/lfm2.py", "short_conv", 42, 51)
JET_LAYER_KINDS_SOURCE = cite("srt/configs/jet_nemotron.py", "jet", 42, 56)
GRANITE_LAYER_KINDS = frozenset({"attention", "mamba"})
LFM2_LAYER_KINDS = frozenset({"full_attention", "conv", "short_conv"})
JET_LAYER_KINDS = frozenset({"attn", "swa", "jet"})
SWA_LAYER_KINDS = frozenset({"full_attention", "sliding_attention"})
# Step 3.5/3.7 list their MTP layers past num_hidden_layers and read only i < num_hidden_layers.
STEP_LAYER_TYPES_SOURCE = cite("srt/configs/model_config.py", "Step3p5ForCausalLM", 2735, 2749)
LAYER_TYPES_LIST_MTP_ARCHS = frozenset({"Step3p5ForCausalLM", "Step3p7ForConditionalGeneration"})
# Gemma 4: transformers forces the last layer to full attention (SGLang relies on it).
GEMMA4_LAST_LAYER_FULL = cite("srt/utils/hf_transformers/config.py", "forced to full attention", 125, 126)
GEMMA4_TEXT_MODEL_TYPES = frozenset({"gemma4", "gemma4_text"})
# InklingStateDType is fixed: no env or flag changes it.
INKLING_DTYPE_SOURCE = cite("srt/configs/inkling.py", "InklingStateDType", 253)
INKLING_STATE_DTYPE = "bfloat16"
# Kimi-Linear numbers kda_layers from 1; GLM-5-Next from 0.
KIMI_KDA_NUMBERING_SOURCE = cite("srt/configs/kimi_linear.py", "kda_layers", 158, 162)
GLM5_KDA_NUMBERING_SOURCE = cite("srt/configs/glm5_next.py", "kda_layers", 243, 247)
KDA_ONE_BASED_MODEL_TYPES = frozenset({"kimi_linear", "kimi_k3"})
# Mamba2StateShape.create pads n_groups so every TP shard holds whole groups.
MAMBA2_SHAPE_SOURCE = cite("srt/configs/mamba_utils.py", "extra_groups_for_head_shards", 215, 230)


# --- Which layers hold what: GDN (Qwen3-Next and its descendants), GigaChat-3.5, Nemotron-H, LongCat ---

# Qwen3NextConfig.layers_block_type: layer l is full attention iff (l+1) % full_attention_interval
# == 0. The field has no default there: a config without it cannot build pools.
GDN_INTERVAL_SOURCE = cite("srt/configs/qwen3_next.py", "full_attention_interval", 260, 269)
GDN_INTERVAL_FIELD = "full_attention_interval"
# Qwen4ExpTextConfig reads layer_types when given; these kinds are attention, linear_attention is GDN.
QWEN4_LAYER_TYPES_SOURCE = cite("srt/configs/qwen4_exp.py", "layers_block_type", 83, 94)
QWEN4_ATTENTION_KINDS = frozenset({"full_attention", "qwen_sparse_attention", "indexed_attention"})
GDN_LINEAR_KIND = "linear_attention"
QWEN4_MODEL_TYPES = frozenset({"qwen4_exp", "qwen4_exp_text"})
# GigaChat35Config._resolve_layer_types: layer_types, else full_attention_layers, else all linear.
GIGACHAT_LAYERS_SOURCE = cite("srt/configs/gigachat35.py", "_resolve_layer_types", 157, 190)
GIGACHAT_ATTENTION_KINDS = frozenset({"attention", "full_attention"})
# Nemotron-H's layer list is canonical; its length is the layer count (num_hidden_layers deprecated).
NEMOTRON_H_BLOCKS_SOURCE = cite("srt/configs/nemotron_h.py", "layers_block_type", 195, 209)
NEMOTRON_H_COUNT_SOURCE = cite("srt/configs/nemotron_h.py", "num_hidden_layers", 441, 447)
NEMOTRON_H_KINDS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}
NEMOTRON_H_MODEL_TYPES = frozenset({"nemotron_h", "nemotron_h_puzzle"})
# LongcatFlashConfig takes its layer count from num_layers when num_hidden_layers is absent, and
# SGLang's ModelConfig gives every LongCat layer two attention blocks (two KV-pool layers).
LONGCAT_LAYERS_SOURCE = cite("srt/configs/longcat_flash.py", "num_layers", 81, 83)
LONGCAT_ATTENTION_LAYERS_SOURCE = cite("srt/configs/model_config.py", "num_attention_layers", 1583, 1584)
LONGCAT_ARCHS = frozenset({"LongcatFlashForCausalLM"})
LONGCAT_MODEL_TYPES = frozenset({"longcat_flash"})


@dataclass(frozen=True)
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


# --- Configs SGLang cannot build pools for: exit 2, naming the missing field ---


@dataclass(frozen=True)
class Unbuildable:
    """A config SGLang loads but cannot build pools for, and the field that would fix it."""

    field: str
    why: str
    source: Cite


UNBUILDABLE: dict[str, Unbuildable] = {
    "gdn_interval": Unbuildable(
        GDN_INTERVAL_FIELD, "Qwen3NextConfig.layers_block_type reads it (no default)", GDN_INTERVAL_SOURCE
    ),
    "mamba2_intermediate": Unbuildable(
        "intermediate_size",
        "Mamba2Config.mamba2_cache_params reads it (transformers no longer derives it from expand)",
        cite("srt/configs/mamba2.py", "intermediate_size", 40, 48),
    ),
    "lfm2_no_conv": Unbuildable(
        "layer_types",
        "Lfm2Config.mamba2_cache_params is None without a conv / "
        "short_conv layer, yet mamba2_config still marks the model recurrent",
        cite("srt/configs/lfm2.py", "conv_layer_ids", 67, 69),
    ),
}


# --- Hybrid SWA and MLA: srt/configs/model_config.py ---

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


# --- DeepSeek sparse attention (DSA, DeepSeek-V3.2 / GLM-5) and DeepSeek-V4 ---

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


# --- KV cache dtypes: srt/mem_cache/kv_cache_dtype.py, memory_pool.py ---


MXFP8_POOL = "MHATokenToKVPoolMXFP8"  # the only MXFP8 pool class: MHA rows, no MLA variant
MXFP8_ALIGNMENT = 32  # head_dim multiple (memory_pool.py MHATokenToKVPoolMXFP8)
MXFP8_POOL_SOURCE = cite("srt/mem_cache/memory_pool.py", "MHATokenToKVPoolMXFP8", 3847)
# The MXFP8 pool allocates its block scales as float8_e8m0fnu buffers (other block-scaled dtypes: e8m0
# exponents held in uint8).
SCALE_DTYPES: dict[str, str] = {"mxfp8": "float8_e8m0fnu"}
SCALE_DTYPE_FALLBACK = "uint8 (e8m0)"
SCALE_DTYPES_SOURCE = cite("srt/mem_cache/memory_pool.py", "float8_e8m0fnu", 3941, 3949)


@dataclass(frozen=True)
class KVDtypeRule:
    """How one ``--kv-cache-dtype`` is stored: payload bits per element, and its block scales.

    ``source`` cites the pool code a block-scaled dtype restates (its payload and scale buffers);
    None for the plain dtypes, which the MHA/MLA pools store as given (fp8 as uint8)."""

    payload_bits: int
    storage: str  # what the pool buffer holds, for people
    store_dtype: str  # the torch dtype of the pool buffer (SGLang stores plain fp8 as uint8)
    scale_block: int | None = None  # elements per scale byte, None when not block-scaled
    mha_pool: str = "MHATokenToKVPool"
    source: Source | None = None


# FP4 runs on the plain MHA pool with an FP4 quant method.
FP4_QUANT_SOURCE = cite("srt/mem_cache/kv_cache_configurator.py", "quant_method", 1905, 1919)


KV_DTYPES: dict[str, KVDtypeRule] = {
    "bf16": KVDtypeRule(16, "bfloat16", "bfloat16"),
    "bfloat16": KVDtypeRule(16, "bfloat16", "bfloat16"),
    "fp8_e4m3": KVDtypeRule(8, "float8_e4m3fn as uint8", "uint8"),
    "fp8_e5m2": KVDtypeRule(8, "float8_e5m2 as uint8", "uint8"),
    # The MXFP8 pool stores its payload as e4m3fn, scales in k_scale_buffer / v_scale_buffer.
    "mxfp8": KVDtypeRule(
        8,
        "float8_e4m3fn",
        "float8_e4m3fn",
        32,
        MXFP8_POOL,
        (MXFP8_POOL_SOURCE, cite("srt/mem_cache/memory_pool.py", "float8_e4m3fn", 3900), SCALE_DTYPES_SOURCE),
    ),
    "nvfp4": KVDtypeRule(4, "packed fp4 as uint8", "uint8", 16, source=FP4_QUANT_SOURCE),
    "fp4_mx_block16": KVDtypeRule(4, "packed fp4 as uint8", "uint8", 16, source=FP4_QUANT_SOURCE),
}
# Spellings SGLang's _STR_DTYPE_TO_TORCH_DTYPE accepts for the model dtype.
DTYPE_ALIASES = {"half": "float16", "float": "float32", "bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
# _get_and_verify_dtype reads the *text* config's dtype (transformers hands a sub-config its parent's
# dtype when it states none); float32 or none is served as float16, except Gemma (bfloat16).
# Config classes that default the dtype themselves when the file states none (cited last below).
MODEL_DTYPE_SOURCE = (
    cite("srt/configs/model_config.py", "_get_and_verify_dtype", 881),
    cite("srt/configs/model_config.py", "_get_and_verify_dtype", 2284, 2330),
    cite("srt/configs/interns2_mobius.py", "bfloat16", 22, 23),
    cite("srt/configs/gigachat35.py", "torch_dtype", 151, 155),
    cite("srt/configs/longcat_flash.py", "torch_dtype", 46),
)
CLASS_DEFAULT_DTYPES: dict[str, str] = {
    "interns2_mobius": "bfloat16",
    "interns2_mobius_text": "bfloat16",
    "gigachat3_5": "bfloat16",
    "longcat_flash": "bfloat16",
}
# FA4 on SM100 forces page size 128 for non-MLA models, except DiffusionGemma (page 1).
FA4_PAGE_SOURCE = cite("srt/arg_groups/overrides.py", "_fa4_page_constraint", 1274, 1297)
FA4_PAGE_SIZE = 128
FA4_PAGE_EXEMPT_ARCHS = frozenset({"DiffusionGemmaForBlockDiffusion"})
# TensorRT-LLM MHA runs pages of 16, 32, 64 or 128 tokens; any other page size becomes 64.
TRTLLM_MHA_PAGE_SOURCE = cite("srt/arg_groups/overrides.py", "trtllm_mha", 1174, 1187)
TRTLLM_MHA_PAGE_SIZES = frozenset({16, 32, 64, 128})
TRTLLM_MHA_PAGE_SIZE = 64
# TensorRT-LLM MLA and CuteDSL MLA run pages of 32 or 64 tokens (else 64); FlashMLA only 64.
MLA_PAGE_SOURCE = cite("srt/arg_groups/overrides.py", "_mla_backend_page_constraints", 1144, 1173)
MLA_PAGE_SIZES: dict[str, frozenset[int]] = {
    "trtllm_mla": frozenset({32, 64}),
    "cutedsl_mla": frozenset({32, 64}),
    "flashmla": frozenset({64}),
}
MLA_PAGE_SIZE = 64

# --- The GPU generation: what SGLang picks when the launch names no attention backend ----------
# kvdoctor models a CUDA build on Hopper ("sm90") or Blackwell ("sm100", the default, as the engine
# adapter's GpuArch.SM100). A model override picks first (when every backend flag is unset), then
# get_default_attn_backend fills an unset --attention-backend; the page rules above then apply.
GPU_ARCHS = ("sm90", "sm100")
DEFAULT_GPU_ARCH = "sm100"
# get_default_attn_backend: on SM100 an MHA model runs trtllm_mha (fa4 when its K and V rows differ
# in width), an MLA model flashinfer. On Hopper the generic choices (fa3, flashinfer, triton) carry
# no page rule, so kvdoctor names none there.
GENERIC_BACKEND_SOURCE = cite("srt/arg_groups/model_override_base.py", "get_default_attn_backend", 277, 352)
GENERIC_BACKENDS: dict[tuple[str, str], str] = {
    ("sm100", "mha"): "trtllm_mha",
    ("sm100", "mha_asymmetric_kv"): "fa4",
    ("sm100", "mla"): "flashinfer",
}
DEFAULT_BACKEND_SOURCE = cite("srt/arg_groups/overrides.py", "_attention_backend_default", 1127, 1140)
# Model overrides, by architecture and generation (absent: the override leaves it to the generic one).
_TRTLLM_MLA_ARCHS = (
    "DeepseekV3ForCausalLM",
    "DeepseekV32ForCausalLM",
    "KimiK25ForConditionalGeneration",
    "MistralLarge3ForCausalLM",
    "PixtralForConditionalGeneration",
    "GlmMoeDsaForCausalLM",
    "Glm5NextForConditionalGeneration",
    "HYV4ForCausalLM",
    "HYV4ForCausalLMNextN",
    "LongcatFlashForCausalLM",
    "LongcatFlashForCausalLMNextN",
    "Dots3NoteForCausalLM",
)


def _each(archs: tuple[str, ...], picks: dict[str, str]) -> dict[str, dict[str, str]]:
    return {arch: dict(picks) for arch in archs}


MODEL_ATTENTION_BACKENDS: dict[str, dict[str, str]] = {
    "BeamForCausalLM": {"sm90": "trtllm_mha", "sm100": "trtllm_mha"},
    "GptOssForCausalLM": {"sm90": "fa3", "sm100": "trtllm_mha"},
    **_each(
        ("Gemma4ForConditionalGeneration", "Gemma4ForCausalLM", "Gemma4UnifiedForConditionalGeneration"),
        {"sm90": "triton", "sm100": "trtllm_mha"},
    ),
    "InklingForConditionalGeneration": {"sm90": "fa4", "sm100": "fa4"},
    **_each(("Step3p5ForCausalLM", "Step3p7ForConditionalGeneration"), {"sm90": "fa3", "sm100": "fa4"}),
    **_each(("FalconH1ForCausalLM", "JetNemotronForCausalLM", "JetVLMForConditionalGeneration"), {"sm100": "triton"}),
    **_each(("Lfm2ForCausalLM", "Lfm2MoeForCausalLM"), {"sm100": "flashinfer"}),
    **_each(
        ("NemotronHForCausalLM", "NemotronHPuzzleForCausalLM", "NemotronH_Omni_Reasoning_V3"), {"sm100": "trtllm_mha"}
    ),
    **_each(_TRTLLM_MLA_ARCHS, {"sm100": "trtllm_mla"}),  # not the DSA ones: they run "dsa"
}
MODEL_ATTENTION_BACKENDS_SOURCE = (
    cite("srt/arg_groups/model_overrides/beam.py", "trtllm_mha", 26, 31),
    cite("srt/arg_groups/model_overrides/gpt_oss.py", "_gpt_oss_overrides", 25, 33),
    cite("srt/arg_groups/model_overrides/gemma4.py", "default_attention_backend", 30, 44),
    cite("srt/arg_groups/model_overrides/inkling.py", "inkling_attn_backend", 68, 73),
    cite("srt/arg_groups/overrides.py", "_step3p_overrides", 336, 345),
    cite("srt/arg_groups/model_overrides/falcon_h1.py", "triton", 15, 18),
    cite("srt/arg_groups/model_overrides/lfm2.py", "flashinfer", 12, 16),
    cite("srt/arg_groups/model_overrides/nemotron_h.py", "trtllm_mha", 123, 148),
    cite("srt/arg_groups/model_overrides/deepseek_v2.py", "trtllm_mla", 178, 185),
)
# GraniteMoeHybrid picks flashinfer on SM100 only when it has Mamba layers.
SSM_ONLY_BACKENDS: dict[str, dict[str, str]] = {"GraniteMoeHybridForCausalLM": {"sm100": "flashinfer"}}
SSM_ONLY_BACKENDS_SOURCE = cite("srt/arg_groups/model_overrides/granitemoehybrid.py", "flashinfer", 13, 19)
# The Qwen3.5 hybrid family and Qwen4-exp on SM100 (when --attention-backend is unset): triton at page
# 1 when the radix cache is on without extra_buffer (no speculative decoding is modelled), else
# trtllm_mha at page 64; the page size is written either way.
RADIX_TRITON_ARCHS = frozenset(
    {
        "Qwen3NextForCausalLM",
        "Qwen3_5MoeForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration",
        "InternS2MobiusForConditionalGeneration",
        "Qwen3_5ForConditionalGeneration",
        "Qwen4ExpForConditionalGeneration",
    }
)
RADIX_TRITON_SOURCE = (
    cite("srt/arg_groups/model_overrides/qwen3_5.py", "_qwen3_5_hybrid_overrides", 24, 49),
    cite("srt/arg_groups/model_overrides/qwen4_exp.py", "sm100_default_attn_backend", 57, 71),
)
RADIX_TRITON_PAGES = {"triton": 1, "trtllm_mha": 64}
# DeepSeek DSA: an unset KV dtype is fp8_e4m3 on SM100+ (bfloat16 with learnable sinks or on Hopper).
DSA_KV_DTYPE_AUTO = {"sm90": "bfloat16", "sm100": "fp8_e4m3"}
# A hybrid-SWA model without full-attention layers runs on PureSWATokenToKVPoolAllocator, which
# asserts page_size == 1.
ALL_SWA_PAGE_SOURCE = cite("srt/mem_cache/allocator/swa.py", "PureSWATokenToKVPoolAllocator", 727, 740)
ALL_SWA_PAGE_SIZE = 1
MXFP8_MIN_SM = 100  # SGLang's MXFP8 KV path needs SM100+ and the FA4 backend
MXFP8_SM100_SOURCE = cite("srt/arg_groups/kv_cache_hook.py", "handle_mxfp8_kv_cache_compatibility", 100, 109)


# --- Pools and their CPU copies: srt/mem_cache/memory_pool.py, swa_memory_pool.py ---

# The request-to-token pool: a decode server builds the decode variants (the hybrid one subclasses
# HybridReqToTokenPool), everything else the plain or hybrid pool.
REQ_POOL_SOURCE = cite("srt/mem_cache/kv_cache_configurator.py", "_build_req_to_token_pool", 1571, 1601)
REQ_POOLS = {  # (decode server, recurrent state) -> class
    (False, False): "ReqToTokenPool",
    (False, True): "HybridReqToTokenPool",
    (True, False): "DecodeReqToTokenPool",
    (True, True): "HybridMambaDecodeReqToTokenPool",
}
HYBRID_REQ_POOLS = frozenset({"HybridReqToTokenPool", "HybridMambaDecodeReqToTokenPool"})
# cpu_copy_carries_mamba: KVCache default False; HybridLinearKVPool True.
CARRIES_MAMBA: dict[str, bool] = {"HybridLinearKVPool": True}
CARRIES_MAMBA_SOURCE = (
    cite("srt/mem_cache/memory_pool.py", "cpu_copy_carries_mamba", 2010),
    cite("srt/mem_cache/memory_pool.py", "cpu_copy_carries_mamba", 4231),
)
MAMBA_BACKUP_SOURCE = cite("srt/managers/schedule_batch.py", "_mamba_pool_needing_backup", 2102)
# The DSA pool's CPU copy carries its index keys (and pooled tail) with the latent rows.
DSA_CPU_COPY_SOURCE = cite("srt/mem_cache/memory_pool.py", "index_k", 5622, 5633)


# --- Retraction backup backend: srt/mem_cache/kv_cache_builder.py ---
# "none" keeps no backup: the retracted request is aborted (503).
RETRACTION_BACKUPS_SOURCE = cite("srt/arg_groups/fields/disagg.py", "disaggregation_decode_retraction_backup", 95, 108)


@dataclass(frozen=True)
class BackupCondition:
    """One conjunct of ``host_pool`` selection (resolve_decode_retraction_backup, kv_cache_builder.py
    lines 186-242); every one must hold for host_pool. Each cites its own lines of that function."""

    name: str
    meaning: str
    source: Source


BACKUP_CONDITIONS: tuple[BackupCondition, ...] = (
    BackupCondition(
        "decode_server",
        "--disaggregation-mode decode (others keep cpu_tensor)",
        cite("srt/mem_cache/kv_cache_builder.py", "disaggregation_mode", 230),
    ),
    BackupCondition(
        "not_hip",
        "not a ROCm build (large HIP restores can fault the GPU process)",
        cite("srt/mem_cache/kv_cache_builder.py", "is_hip", 231, 233),
    ),
    BackupCondition(
        "no_dcp", "decode context parallel off", cite("srt/mem_cache/kv_cache_builder.py", "dcp_enabled", 234)
    ),
    BackupCondition(
        "no_decode_radix_cache",
        "--disaggregation-decode-enable-radix-cache off",
        cite("srt/mem_cache/kv_cache_builder.py", "disaggregation_decode_enable_radix_cache", 235),
    ),
    BackupCondition(
        "no_decode_offload",
        "--disaggregation-decode-enable-offload-kvcache off (KV offload already owns a host pool)",
        cite("srt/mem_cache/kv_cache_builder.py", "disaggregation_decode_enable_offload_kvcache", 236, 237),
    ),
    BackupCondition(
        "no_priority_preemption",
        "priority scheduling off, or its preemption disabled",
        cite("srt/mem_cache/kv_cache_builder.py", "priority_preemption", 223, 227),
    ),
    BackupCondition(
        "no_recurrent_state",
        "the model keeps no recurrent/conv state (host_pool has no recurrent-state sidecar)",
        (USES_SSM_STATE, cite("srt/mem_cache/kv_cache_builder.py", "uses_ssm_state", 212, 217)),
    ),
    BackupCondition(
        "no_unified_hybrid_swa",
        "not unified memory on a hybrid-SWA model",
        cite("srt/mem_cache/kv_cache_builder.py", "unified_hybrid_swa", 198),
    ),
    BackupCondition(
        "unified_draft_ok",
        "no unified memory with MTP draft pools (unless DSpark)",
        cite("srt/mem_cache/kv_cache_builder.py", "unified_draft_host_pool_supported", 207, 211),
    ),
    BackupCondition(
        "host_pool_kv_layout",
        "KV pool is an MHATokenToKVPool (subclasses too), or an SWAKVPool with full tokens per layer > 0",
        cite("srt/mem_cache/kv_cache_builder.py", "full_tokens_per_layer", 218, 221),
    ),
)
HOST_POOL_LAYOUTS = ("MHATokenToKVPool", "MHATokenToKVPoolMXFP8", "MHATokenToKVPoolFP4")
BACKUP_ONLY_HICACHE_RATIO = 0.2
DEFAULT_HICACHE_RATIO = 2.0
# A request-to-token row holds the context plus 4 tokens (plus speculative draft tokens, which
# kvdoctor does not model), so decode_retraction_max_tokens' max_context_len - 1 is context + 3: the
# backup-only ratio's floor is sized from it (cited last).
HICACHE_RATIO_SOURCE = (
    cite("srt/mem_cache/kv_cache_builder.py", "BACKUP_ONLY_HICACHE_RATIO", 162, 170),
    cite("srt/mem_cache/kv_cache_builder.py", "hicache_ratio", 244, 260),
    cite("srt/mem_cache/allocation_sizing.py", "get_req_to_token_extra_context_len", 96, 105),
)
REQ_TO_TOKEN_EXTRA = 4
# A server that is not a decode server resolves an unset ratio at start-up: 2.0, or 1.2 when HiCache
# host memory is a buffer only.
NON_DECODE_HICACHE_SOURCE = cite("srt/arg_groups/hicache_hook.py", "handle_hicache_ratio_default", 100, 122)
NON_DECODE_HICACHE_RATIO = 2.0
BUFFER_ONLY_HICACHE_RATIO = 1.2
# What the host_pool backend moves: the unified tree's full and SWA components. Block scales ride
# along only in MHATokenToKVPoolMXFP8Host, chosen for the page-interleaved MXFP8 layout; FP4 and
# flat-layout MXFP8 fall back to the plain MHA host pool.
HOST_POOL_CARRIES = frozenset({"full_kv", "swa_kv", "mla_kv"})
HOST_POOL_SCALES_SOURCE = cite("srt/mem_cache/pool_host/mha.py", "MHATokenToKVPoolMXFP8Host", 1684, 1698)


# --- Launches SGLang 0.5.23 refuses at start-up (hazard KVD014, with SGLang's message and place) ---


@dataclass(frozen=True)
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


# --- PD state types: srt/disaggregation/base/conn.py (class StateType) ---
# Pools whose block scales a PD transfer registers: a top-level MXFP8 pool, and both sub-pools of an
# SWAKVPool (SWAKVPool builds both with the MXFP8 class, even a sub-pool with no layers).
PD_BLOCK_SCALE_POOLS = frozenset({"MHATokenToKVPoolMXFP8"})
PD_BLOCK_SCALE_SOURCE = (
    cite("srt/disaggregation/utils.py", "BLOCK_SCALE", 1513, 1518),
    cite("srt/disaggregation/utils.py", "BLOCK_SCALE_SWA", 1561, 1568),
    cite("srt/mem_cache/swa_memory_pool.py", "full_kv_pool", 96, 106),
)
# A decode host-receive threshold below 1 declares this backend, whatever the flag said (only an
# explicit cpu_tensor is refused).
HOST_RECEIVE_BACKEND = "host_pool"
HOST_RECEIVE_SOURCE = cite(
    "srt/arg_groups/pd_disaggregation_hook.py", "disaggregation_decode_retraction_backup", 68, 80
)
# A decode server without --disaggregation-decode-enable-radix-cache declares disable_radix_cache, which
# the hierarchical-cache check then meets (REFUSALS["hicache_without_radix"]).
DECODE_RADIX_SOURCE = cite("srt/arg_groups/pd_disaggregation_hook.py", "disable_radix_cache", 121, 127)
PD_STATE_TYPES_SOURCE = (
    cite("srt/disaggregation/base/conn.py", "StateType", 14, 41),
    cite("srt/disaggregation/utils.py", "setup_state_kv_args", 1462, 1468),
)


# --- Pool sizing: srt/mem_cache/kv_cache_configurator.py ---
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
# The strategy's resolution (MAMBA_EXTRA_BUFFER_ARCHS, FORCED_MAMBA_STRATEGY below) is cited here too.
MAMBA_SLOTS_SOURCE = (
    cite("srt/mem_cache/kv_cache_configurator.py", "_calculate_mamba_ratio", 3062, 3088),
    cite("srt/mem_cache/allocation_sizing.py", "get_mamba_tracking_slots", 11, 19),
    cite("srt/arg_groups/overrides.py", "_MAMBA_EXTRA_BUFFER_ARCHS", 401, 486),
    cite("srt/arg_groups/model_overrides/inkling.py", "extra_buffer", 50, 56),
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
# Inkling pins extra_buffer whatever the page size or overlap schedule (unless a strategy is given).
FORCED_MAMBA_STRATEGY = {
    "InklingForConditionalGeneration": "extra_buffer",
    "InklingForConditionalGenerationMTP": "extra_buffer",
}
# The KV offload chunk of every pool's get_cpu_copy.
CPU_OFFLOAD_CHUNK_SOURCE = cite("srt/mem_cache/memory_pool.py", "cpu_offloading_chunk_size", 2043, 2044)
CPU_OFFLOAD_CHUNK = 8192
# MXFP8 scale planes are page-interleaved only at page size 128, and the interleaved store packs four
# scales per word: head_dim 128 only.
MXFP8_INTERLEAVED_SOURCE = (
    cite("srt/mem_cache/memory_pool.py", "mxfp8_sf_interleaved", 3918, 3946),
    cite("kernels/ops/kvcache/mxfp8_interleave_sf.py", "hdim=128", 73, 77),
)
MXFP8_INTERLEAVED_PAGE = 128
MXFP8_INTERLEAVED_HEAD_DIM = 128
# KV dtypes whose pool CPU copy carries the block scales: only the MXFP8 pool overrides get_cpu_copy;
# the plain MHA/MLA copies move k/v (or the latent row) only, leaving FP4 scales behind.
CPU_COPY_SCALES_SOURCE = (
    cite("srt/mem_cache/memory_pool.py", "get_cpu_copy", 4131, 4186),
    cite("srt/mem_cache/memory_pool.py", "get_cpu_copy", 2791, 2810),
    cite("srt/mem_cache/memory_pool.py", "get_cpu_copy", 5093, 5111),
)
CPU_COPY_CARRIES_SCALES = frozenset({"mxfp8"})
