"""How SGLang's config classes read a model's layers: the normalisations they apply before any rule reads
them (aliases, defaults, numbering) and which layers hold what (GDN, GigaChat-3.5, Nemotron-H, LongCat)."""

from __future__ import annotations

from kvdoctor.core.sglang.rules.citations import cite

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


# Which layers hold what: GDN (Qwen3-Next and its descendants), GigaChat-3.5, Nemotron-H, LongCat

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
# The model types both read the count from: core/config_rules.py (the shared loader's).
NEMOTRON_H_BLOCKS_SOURCE = cite("srt/configs/nemotron_h.py", "layers_block_type", 195, 209)
NEMOTRON_H_COUNT_SOURCE = cite("srt/configs/nemotron_h.py", "num_hidden_layers", 441, 447)
NEMOTRON_H_KINDS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}
# LongcatFlashConfig takes its layer count from num_layers when num_hidden_layers is absent, and
# SGLang's ModelConfig gives every LongCat layer two attention blocks (two KV-pool layers).
# The model types that read num_layers: core/config_rules.py (the shared loader's).
LONGCAT_LAYERS_SOURCE = cite("srt/configs/longcat_flash.py", "num_layers", 81, 83)
LONGCAT_ATTENTION_LAYERS_SOURCE = cite("srt/configs/model_config.py", "num_attention_layers", 1583, 1584)
LONGCAT_ARCHS = frozenset({"LongcatFlashForCausalLM"})
# Gemma 3n keeps one MLP width per layer and each decoder layer reads its own (the model types whose
# intermediate_size may be that list: core/config_rules.py, PER_LAYER_INTERMEDIATE_MODEL_TYPES).
GEMMA3N_INTERMEDIATE_SOURCE = cite("srt/models/gemma3n_causal.py", "intermediate_size", 523)
# Loop models run their layers several times, one RadixAttention (and KV-pool layer) per layer per loop:
# ids layer + loop * num_hidden_layers. resolve_layer_indices multiplies the model's layer range (its
# num_hidden_layers at PP 1) by _get_loop_num: the config's loop_num, else num_loops, else 1 (a falsy
# value is 1). NanbeigeConfig defaults num_loops to 2.
LOOP_LAYERS_SOURCE = (
    cite("srt/model_executor/model_runner_components/layer_setup.py", "_get_loop_num", 20, 22),
    cite("srt/model_executor/model_runner_components/layer_setup.py", "loop_num", 156, 159),
    cite("srt/models/nanbeige.py", "base_layer_id", 166, 175),
    cite("srt/configs/model_config.py", "num_loops", 1585, 1590),
)
LOOP_COUNT_FIELDS = ("loop_num", "num_loops")  # the first the config states
NANBEIGE_LOOPS_SOURCE = cite("srt/configs/nanbeige.py", "num_loops", 144)
CLASS_DEFAULT_LOOPS = {"nanbeige": 2}  # by model type, when the file states no loop count
