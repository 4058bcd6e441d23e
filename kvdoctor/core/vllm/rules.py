"""What vLLM 0.33.0 does, restated once, each fact naming the file and lines of the wheel it mirrors.

Read from ``pip download --no-deps vllm==0.33.0`` (never imported here). When vLLM moves, this module
(and the generated ``server_flags``/``architectures``) is what gets re-checked; ``tests/engines/vllm`` holds
vLLM's own code to every answer derived from it.
"""

from __future__ import annotations

from enum import Enum

from kvdoctor.core.cite import Citations, Cite
from kvdoctor.core.record import record

# Restated here, not read from the generated flag table (1,900 lines a launch line without an option never needs):
# tests/core/test_servers.py holds it to the table's VLLM_VERSION and to the seam's facts (core/vllm/server.py).
VLLM_VERSION = "0.33.0"
RULES_REVISION = f"vllm=={VLLM_VERSION}"


class Family(str, Enum):
    """How a model's layers map to KV cache specs (``get_kv_cache_spec`` of each layer)."""

    DENSE = "dense"  # every layer FullAttentionSpec
    SWA_LAYER_TYPES = "swa_layer_types"  # config.layer_types: sliding_attention / full_attention
    SWA_PATTERN = "swa_pattern"  # Gemma 2/3: every Nth layer full, the rest sliding
    MLA = "mla"  # MLAAttentionSpec (latent KV, one head)
    GDN = "gdn"  # Qwen3-Next: gated delta net MambaSpec + full attention
    MAMBA2_HYBRID = "mamba2_hybrid"  # Nemotron-H: Mamba2 MambaSpec + full attention
    MAMBA2_LAYER_TYPES = "mamba2_layer_types"  # Granite 4.0: layer_types linear_attention (Mamba2) / full_attention
    MAMBA1_HYBRID = "mamba1_hybrid"  # Jamba: layers_block_type mamba (Mamba1 MambaSpec) / attention
    SHORT_CONV_HYBRID = "short_conv_hybrid"  # LFM2: layer_types conv (short-convolution MambaSpec) / full_attention


# architecture → family, for the architectures kvdoctor's vLLM rules model. Each row's layer rule:
#   qwen3_next.py:259-313 (layer_types, default from full_attention_interval), nemotron_h.py (hybrid_override_pattern
#   M = Mamba2 mixer, * = attention, - / E = MLP / MoE without state), gpt_oss.py (layer_types + sliding_window),
#   gemma3.py / gemma2.py (layer_types, transformers' default: layer i is sliding unless (i + 1) % pattern == 0),
#   deepseek_v2.py (MLAAttention: kv_lora_rank + qk_rope_head_dim, one latent head).
FAMILIES: dict[str, Family] = {
    "LlamaForCausalLM": Family.DENSE,
    "MistralForCausalLM": Family.DENSE,
    "Qwen2ForCausalLM": Family.DENSE,
    "Qwen3ForCausalLM": Family.DENSE,
    "Qwen3MoeForCausalLM": Family.DENSE,
    "GptOssForCausalLM": Family.SWA_LAYER_TYPES,
    "Gemma2ForCausalLM": Family.SWA_PATTERN,
    "Gemma3ForCausalLM": Family.SWA_PATTERN,
    "Gemma3ForConditionalGeneration": Family.SWA_PATTERN,
    "DeepseekV2ForCausalLM": Family.MLA,
    "DeepseekV3ForCausalLM": Family.MLA,
    "Qwen3NextForCausalLM": Family.GDN,
    "NemotronHForCausalLM": Family.MAMBA2_HYBRID,
    "GraniteMoeHybridForCausalLM": Family.MAMBA2_LAYER_TYPES,
    "JambaForCausalLM": Family.MAMBA1_HYBRID,
    "Lfm2ForCausalLM": Family.SHORT_CONV_HYBRID,
}
MAMBA2_FAMILIES = frozenset({Family.MAMBA2_HYBRID, Family.MAMBA2_LAYER_TYPES})
MAMBA_FAMILIES = frozenset({Family.GDN, Family.MAMBA1_HYBRID, Family.SHORT_CONV_HYBRID, *MAMBA2_FAMILIES})
GEMMA2_PATTERN = 2  # transformers' Gemma2Config: layer_types alternate, sliding first

# cache_config.py: CacheConfig.DEFAULT_BLOCK_SIZE = 16 (config/cache.py:185).
DEFAULT_BLOCK_SIZE = 16
# FLASH_ATTN (the CUDA default backend) kernel blocks are MultipleOf(16): v1/attention/backends/flash_attn.py:357-370.
KERNEL_BLOCK_ALIGNMENT = 16
# platforms/interface.py:1084-1088: hybrid MLA/Mamba models align the block size to 128 tokens.
MLA_KERNEL_BLOCK_ALIGNMENT = 128
# NemotronHForCausalLMConfig.DEFAULT_MAMBA_SSM_CACHE_DTYPE (model_executor/models/config.py:812-832).
NEMOTRON_H_SSM_DTYPE = "float32"

# KV cache dtypes (config/cache.py:44-67, CacheDType) → bytes per element; None: a packed layout.
KV_DTYPE_BYTES: dict[str, float | None] = {
    "auto": None,
    "bfloat16": 2,
    "float16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
    "nvfp4": None,
    "nvfp4_4over6": None,
    "fp8_per_token_head": 1,  # + one fp32 scale per (token, head) and side, inline (PER_TOKEN_HEAD below)
    "int8_per_token_head": 1,
    "int4_per_token_head": 0.5,  # two nibbles a byte
}
# Block-scaled KV dtypes: packed FP4 payload + FP8 block scales per 16 elements, one byte row per side
# (utils/torch_utils.py:542-544 nvfp4_kv_cache_full_dim, flashinfer.py:561-565 customize_spec).
BLOCK_SCALED_KV_DTYPES = frozenset({"nvfp4", "nvfp4_4over6"})


@record(frozen=True)
class TokenHeadMode:
    """One per-token-head KV dtype: the element dtype kvdoctor names, and the K/V values one byte holds."""

    dtype: str
    per_byte: int


# Per-token-head KV dtypes (CacheDType, config/cache.py:62-64; KVQuantMode.is_per_token_head and get_kv_quant_mode,
# v1/kv_cache_interface.py:72-79, 121-133) keep one fp32 scale per (token, head) and side inside the page.
# TritonAttentionBackend.customize_spec sets the cell's content bytes to (hs_k + hs_v) * dtype size + 2 * 4, int4
# halving the head sizes (PER_TOKEN_HEAD_CONTENT); GPUModelRunner.get_kv_cache_spec applies the backend's
# customize_spec to every attention spec (PER_TOKEN_HEAD_APPLIED). TritonAttentionImpl._ensure_scale_caches reads
# each (head, slot) cell as [K(hs) | K_scale(fp32) | V(hs) | V_scale(fp32)] (PER_TOKEN_HEAD_CELL) and the content
# axis is innermost in every layout (PER_TOKEN_HEAD_LAYOUT), so a page is whole cells of that pattern. TRITON_ATTN
# is the only backend of vLLM 0.33 listing these modes in supported_kv_cache_dtypes (PER_TOKEN_HEAD_BACKEND); the
# MLA backends list none of them. The cache is allocated as uint8 / int8 / uint8 (STR_DTYPE_TO_TORCH_DTYPE,
# utils/torch_utils.py:50-52) and the FP8 halves viewed as fp8 (TritonAttentionImpl._pth_key_value_caches); INT4's
# zero point hides in its scale's low mantissa bits (v1/attention/ops/int4_per_token_head.py:4-11): no extra bytes.
PER_TOKEN_HEAD: dict[str, TokenHeadMode] = {
    "fp8_per_token_head": TokenHeadMode("float8_e4m3fn", 1),
    "int8_per_token_head": TokenHeadMode("int8", 1),
    "int4_per_token_head": TokenHeadMode("uint8", 2),
}
PER_TOKEN_HEAD_SCALE_BYTES = 4  # get_dtype_size(torch.float32)
MODEL_DTYPES = {"bfloat16": 2, "float16": 2, "float32": 4, "half": 2, "float": 4}
STATE_DTYPES = ("auto", "float32", "bfloat16", "float16")  # MambaDType (config/cache.py)


CITATIONS = Citations("vllm", RULES_REVISION)
cite = CITATIONS.cite

# Hybrids vLLM 0.33 no longer registers: _PREVIOUSLY_SUPPORTED_MODELS names the last version that served each.
REMOVED_ARCHITECTURES: dict[str, str] = {
    "BambaForCausalLM": "0.23.0",
    "MiniMaxForCausalLM": "0.23.0",
    "MiniMaxText01ForCausalLM": "0.23.0",
    "MiniMaxM1ForCausalLM": "0.23.0",
    "Plamo2ForCausalLM": "0.26.0",
}
REMOVED_WHERE = cite("model_executor/models/registry.py", "_PREVIOUSLY_SUPPORTED_MODELS", 841, 895)

# GraniteMoeHybrid (Granite 4.0): each layer is ALL_DECODER_LAYER_TYPES[config.layer_types[i]], full_attention an
# attention layer (``model.layers.i.self_attn.attn``), linear_attention a Mamba2 mixer (``model.layers.i.mixer``);
# transformers remaps the legacy names ("attention", "mamba": configuration_utils.py _LEGACY_LAYER_TYPE_REMAP) and
# defaults layer_types to all linear_attention. The attention head is hidden_size // num_attention_heads (head_dim is
# not read); the Mamba2 state is mamba2_state_shape(intermediate = mamba_expand * hidden_size, mamba_n_groups,
# mamba_n_heads, mamba_d_head, mamba_d_state, mamba_d_conv) and mamba2_state_dtype with no config override of the
# SSM dtype ("auto": the conv dtype, mamba_utils.py:97-110).
GRANITE_HYBRID_LAYERS = cite(
    "model_executor/models/granitemoehybrid.py", "ALL_DECODER_LAYER_TYPES / GraniteMoeHybridModel.get_layer", 321, 361
)
GRANITE_HYBRID_HEAD = cite(
    "model_executor/models/granitemoehybrid.py", "GraniteMoeHybridAttention: head_dim = hidden_size // heads", 239, 241
)
GRANITE_HYBRID_STATE = cite(
    "model_executor/models/granitemoehybrid.py",
    "GraniteMoeHybridForCausalLM.get_mamba_state_dtype_from_config / get_mamba_state_shape_from_config",
    605,
    646,
)
# Nemotron-H: NemotronHModel makes len(config.hybrid_override_pattern) layers, one per letter (nemotron_h.py:591-614);
# transformers' NemotronHConfig derives the pattern from layers_block_type (configuration_nemotron_h.py:158-166,
# 246-271: linear_attention M, moe E, full_attention *, mlp -; legacy "mamba" / "attention" remapped).
NEMOTRON_H_LAYERS = cite(
    "model_executor/models/nemotron_h.py", "NemotronHModel: layers of hybrid_override_pattern", 591, 614
)
NEMOTRON_H_LAYER_TYPES = {
    "linear_attention": "mamba",
    "mamba": "mamba",
    "full_attention": "full",
    "attention": "full",
    "moe": "none",
    "mlp": "none",
}
NEMOTRON_H_DEFAULT_LAYERS = ("linear_attention", "moe", "full_attention", "mlp")
GRANITE_LAYER_TYPES = {"full_attention": "full", "attention": "full", "linear_attention": "mamba", "mamba": "mamba"}
# transformers' GraniteMoeHybridConfig defaults (configuration_granitemoehybrid.py:85-107): mamba_d_head "auto" is
# mamba_expand * hidden_size // mamba_n_heads.
GRANITE_MAMBA_DEFAULTS = {"mamba_n_heads": 128, "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4}
GRANITE_MAMBA_EXPAND = 2

# Jamba: each layer is ALL_DECODER_LAYER_TYPES[config.layers_block_type[i]] (attention / mamba), transformers'
# JambaConfig.layers_block_type being "attention" where i % attn_layer_period == attn_layer_offset (defaults 8, 4,
# configuration_jamba.py:79-103); the attention head is hidden_size // num_attention_heads; the Mamba1 state is
# mamba1_state_shape(intermediate = mamba_expand * hidden_size, mamba_d_state, mamba_d_conv): conv
# (d_conv - 1, intermediate / TP), SSM (intermediate / TP, d_state) (mamba_utils.py:171-183), dtypes as Mamba2's.
JAMBA_LAYERS = cite("model_executor/models/jamba.py", "ALL_DECODER_LAYER_TYPES / JambaModel.get_layer", 293, 334)
JAMBA_HEAD = cite("model_executor/models/jamba.py", "JambaAttentionDecoderLayer: head_dim = hidden_size // heads", 209)
JAMBA_STATE = cite(
    "model_executor/models/jamba.py",
    "JambaForCausalLM.get_mamba_state_dtype_from_config / get_mamba_state_shape_from_config",
    458,
    483,
)
JAMBA_DEFAULTS = {"attn_layer_period": 8, "attn_layer_offset": 4, "mamba_d_state": 16, "mamba_d_conv": 4}
JAMBA_MAMBA_EXPAND = 2
# LFM2: a layer is attention where layer_types[i] == "full_attention", a ShortConv layer otherwise (lfm2.py:433-450);
# transformers' Lfm2Config defaults layer_types from full_attn_idxs (every layer, configuration_lfm2.py:81-88); the
# attention head is hidden_size // num_attention_heads (lfm2.py:135); the state is short_conv_state_shape(conv_dim,
# conv_L_cache): one conv state (conv_L_cache - 1, conv_dim / TP) in the conv dtype (mamba_utils.py:113-119, 249-258).
LFM2_LAYERS = cite("model_executor/models/lfm2.py", "Lfm2Model.get_layer: full_attention or ShortConv", 433, 450)
LFM2_HEAD = cite("model_executor/models/lfm2.py", "Lfm2Attention: head_dim = hidden_size // heads", 135)
LFM2_STATE = cite(
    "model_executor/models/lfm2.py",
    "Lfm2ForCausalLM.get_mamba_state_dtype_from_config / get_mamba_state_shape_from_config",
    545,
    577,
)
LFM2_CONV_L_CACHE = 3
# Architectures whose attention head is hidden_size // num_attention_heads whatever head_dim says.
HEAD_FROM_HIDDEN = frozenset({"GraniteMoeHybridForCausalLM", "JambaForCausalLM", "Lfm2ForCausalLM"})


@record(frozen=True)
class Unmodelled:
    """A hybrid vLLM serves whose state kvdoctor's vLLM rules do not derive yet: what they lack, and where."""

    missing: str
    where: Cite


# The hybrids vLLM 0.33 serves that the rules above do not model, each naming the piece they lack.
UNMODELLED: dict[str, Unmodelled] = {
    "FalconH1ForCausalLM": Unmodelled(
        "a parallel hybrid: every layer keeps an attention KV cache and a Mamba2 state side by side, the Mamba2 "
        "mixer registered under a renumbered prefix",
        cite("model_executor/models/falcon_h1.py", "FalconH1ParallelHybrid: ssm_prefix", 313, 353),
    ),
    "Zamba2ForCausalLM": Unmodelled(
        "shared attention blocks reused by the 'hybrid' layers (one KV cache per use, attn.{j}) beside Mamba2 state",
        cite("model_executor/models/zamba2.py", "Zamba2Model: layers_block_type / Zamba2HybridLayer", 745, 760),
    ),
    "Lfm2MoeForCausalLM": Unmodelled(
        "short-convolution state (short_conv_state_shape) over hidden_size, with no default layer_types",
        cite("model_executor/models/lfm2_moe.py", "Lfm2MoeForCausalLM.get_mamba_state_shape_from_config", 546, 567),
    ),
    "KimiLinearForCausalLM": Unmodelled(
        "Kimi delta attention state (kda_state_shape) beside MLA layers",
        cite("models/kimi_k3/nvidia/model.py", "KimiLinearForCausalLM.get_mamba_state_shape_from_config", 1506, 1523),
    ),
}

GROUPING = cite("v1/core/kv_cache_planning.py", "get_kv_cache_groups", 1113, 1200)
UNIFY_PAGE = cite("v1/core/kv_cache_planning.py", "unify_kv_cache_spec_page_size", 346, 408)
GROUP_BY_PAGE = cite("v1/core/kv_cache_planning.py", "_get_kv_cache_groups_uniform_page_size", 416, 556)
PROMOTE = cite("v1/core/kv_cache_planning.py", "_promote_local_kv_cache_specs", 744, 815)
ALIGN_HYBRID = cite("platforms/interface.py", "_align_hybrid_block_size", 940, 1131)
PREEMPT = cite("v1/core/sched/scheduler.py", "Scheduler._preempt_request", 1799, 1843)
HMA_OFF = cite("config/vllm.py", "VllmConfig: connector without SupportsHMA", 2263, 2279)
SUPPORTS_HMA = cite("distributed/kv_transfer/kv_connector/v1/base.py", "SupportsHMA / supports_hma", 101, 136)
TRANSFER_GROUPS = cite("v1/kv_cache_interface.py", "KVCacheConfig.prefix_cacheable_group_ids", 1561, 1577)
CIRCULAR_NOT_CACHEABLE = cite("v1/kv_cache_interface.py", "CircularBufferSpec.prefix_cacheable", 998, 1000)
OFFLOAD_GROUPS = cite(
    "distributed/kv_transfer/kv_connector/v1/offloading/config.py", "get_offloading_group_ids", 38, 45
)
OFFLOAD_WINDOW = cite(
    "distributed/kv_transfer/kv_connector/v1/offloading/config.py", "get_sliding_window_size_in_chunks", 58, 84
)
OFFLOAD_MAMBA = cite(
    "distributed/kv_transfer/kv_connector/v1/offloading/worker.py", "MambaSpec pages registered", 122, 129
)
# build_offloading_config's assert: a hybrid (Mamba + attention) model needs --enable-prefix-caching.
OFFLOAD_PREFIX_CACHING = cite(
    "distributed/kv_transfer/kv_connector/v1/offloading/config.py", "build_offloading_config", 113, 119
)
OFFLOAD_FLAGS = cite("config/vllm.py", "_post_init_kv_transfer_config", 1151, 1184)
LMCACHE_MP_ONE_GROUP = cite(
    "distributed/kv_transfer/kv_connector/v1/lmcache_mp_connector.py", "reformat_block_ids", 70, 83
)
NIXL_CONV = cite("distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py", "conv-state transfer", 674, 712)
CONNECTOR_REGISTRY = cite("distributed/kv_transfer/kv_connector/factory.py", "register_connector", 153, 249)
NVFP4_PACKING = cite("utils/torch_utils.py", "nvfp4_kv_cache_full_dim", 542, 544)
PER_TOKEN_HEAD_CONTENT = cite(
    "v1/attention/backends/triton_attn.py", "TritonAttentionBackend.customize_spec: content = (hs_k + hs_v)", 307, 319
)
PER_TOKEN_HEAD_BACKEND = cite(
    "v1/attention/backends/triton_attn.py", "TritonAttentionBackend.supported_kv_cache_dtypes", 326, 336
)
PER_TOKEN_HEAD_CELL = cite(
    "v1/attention/backends/triton_attn.py",
    "TritonAttentionImpl._ensure_scale_caches: [K | K_scale | V | V_scale]",
    414,
    475,
)
PER_TOKEN_HEAD_APPLIED = cite(
    "v1/worker/gpu_model_runner.py", "get_kv_cache_spec: customize_attention_spec", 7108, 7116
)
PER_TOKEN_HEAD_LAYOUT = cite("v1/kv_cache_layout.py", "KVCacheLayout: logical [L, B, H, N, C], C last", 15, 28)
PER_TOKEN_HEAD_MODES = cite("v1/kv_cache_interface.py", "KVQuantMode.is_per_token_head", 72, 79)
PER_TOKEN_HEAD_STORAGE = cite("utils/torch_utils.py", "STR_DTYPE_TO_TORCH_DTYPE: *_per_token_head", 50, 52)
PER_TOKEN_HEAD_INT4 = cite("v1/attention/ops/int4_per_token_head.py", "zero-point in the scale's mantissa", 4, 11)
# Start-up refusals of --tensor-parallel-size (hazard KVD114, core/vllm/refusals.py), in vLLM's words:
# ModelConfig.verify_with_parallel_config (VllmConfig.__post_init__) divides the attention heads by TP;
# QKVParallelLinear (every attention layer's QKV projection) splits the KV heads over TP, or replicates them
# when there are fewer, with distributed/utils.py:divide, which asserts the division is exact.
TP_HEADS = cite("config/model.py", "ModelConfig.verify_with_parallel_config", 1557, 1564)
TP_HEADS_MESSAGE = "Total number of attention heads ({heads}) must be divisible by tensor parallel size ({tp})."
TP_KV_HEADS = cite("model_executor/layers/linear.py", "QKVParallelLinear: divide", 1064, 1071)
TP_KV_HEADS_MESSAGE = "{numerator} is not divisible by {denominator}"
DIVIDE = cite("distributed/utils.py", "ensure_divisibility", 51, 55)

# max_model_len (core/vllm/model_len.py): ModelConfig.get_and_verify_max_len calls _get_and_verify_max_len on
# the text config; the length keys are read by derive_max_model_len_and_key, smallest first, a truthy
# model_max_length winning; RoPE factors scale it except for the types whose max_position_embeddings is
# already scaled; --max-model-len is human_readable_int_or_auto, Field(ge=-1), then >= 1 after resolution.
MAX_LEN = cite("config/model.py", "_get_and_verify_max_len", 2545, 2684)
MAX_LEN_CALL = cite("config/model.py", "ModelConfig.get_and_verify_max_len", 2147, 2171)
MAX_LEN_DERIVE = cite("transformers_utils/model_arch_config_convertor.py", "derive_max_model_len_and_key", 374, 407)
MAX_LEN_ROPE = cite("config/model.py", "_get_and_verify_max_len: RoPE scaling factor", 2598, 2634)
MAX_LEN_ROPE_NESTED = cite("transformers_utils/config.py", "is_rope_parameters_nested", 222, 230)
MAX_LEN_ROPE_LEGACY = cite("transformers_utils/config.py", "patch_legacy_rope_type", 609, 634)
MAX_LEN_CHECK = cite("config/model.py", "User-specified max_model_len", 2657, 2683)
MAX_LEN_FIELD = cite("config/model.py", "max_model_len: int = Field(default=None, ge=-1)", 249)
MAX_LEN_POSITIVE = cite("config/model.py", "max_model_len must be a positive integer", 1070, 1075)
MAX_LEN_FLAG = cite("utils/argparse_utils.py", "human_readable_int_or_auto", 77, 94)
MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
DEFAULT_MAX_MODEL_LEN = 2048  # none of the keys: "Assuming the model's maximum length is 2048"
ROPE_PRESCALED = frozenset({"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"})
# rope_parameters nested per layer type (transformers 5.20's ALLOWED_LAYER_TYPES, configuration_utils.py:66-90,
# as is_rope_parameters_nested reads them) or by DeepSeek-V4's rope kind ("main", "compress").
ROPE_NESTING_KEYS = frozenset(
    {
        *("full_attention", "sliding_attention", "chunked_attention", "window_attention", "indexed_attention"),
        *("compressed_sparse_attention", "heavily_compressed_attention", "minimax_m3_sparse", "conv", "moe"),
        *("hybrid", "hybrid_sliding", "reference_sliding_attention", "linear_attention", "sparse", "dense"),
        *("main", "compress"),
    }
)
MAX_LEN_REFUSED = (
    "User-specified max_model_len ({asked}) is greater than the derived max_model_len ({key}={derived} or "
    "model_max_length={model_max_length} in model's config.json). To allow overriding this maximum, set the "
    "env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
)
# Without prefix caching the Mamba block is max_model_len (MambaModelConfig.verify_and_update_config), and
# every Mamba layer builds its MambaSpec with that block (MambaBase.get_kv_cache_spec).
MAMBA_BLOCK_MAX_LEN = cite(
    "model_executor/models/config.py", "MambaModelConfig: mamba_block_size = max_model_len", 780, 787
)
MAMBA_SPEC_BLOCK = cite("model_executor/layers/mamba/abstract.py", "MambaBase.get_kv_cache_spec", 72, 79)

# HFConfigParser.parse builds the config with AutoConfig.from_pretrained (after _CONFIG_REGISTRY): an unknown
# model_type raises (the names: model_types.py).
CONFIG_LOADER = cite("transformers_utils/config.py", "HFConfigParser.parse: AutoConfig.from_pretrained", 443, 452)


class Carries(str, Enum):
    """What a connector does with a group."""

    CARRIED = "carried"
    WINDOW = "carried (window only)"
    LEFT = "left behind"
    REFUSED = "start-up failure"


@record(frozen=True)
class ConnectorRule:
    """One registered connector (factory.py:153-249): its class, HMA support, and what it moves."""

    name: str
    module: str  # under vllm/distributed/kv_transfer/kv_connector/v1/
    supports_hma: bool  # subclasses SupportsHMA (the class line in ``module``)
    kind: str  # "offload" (to CPU/storage and back) or "pd" (prefill → decode) or "other"
    carries_mamba: bool  # has a MambaSpec path
    where: Cite
    note: str = ""


def _c(path: str, symbol: str, start: int, end: int | None = None) -> Cite:
    return cite(f"distributed/kv_transfer/kv_connector/v1/{path}", symbol, start, end)


CONNECTORS: dict[str, ConnectorRule] = {
    rule.name: rule
    for rule in (
        ConnectorRule(
            "OffloadingConnector",
            "offloading_connector",
            True,
            "offload",
            True,
            _c("offloading_connector.py", "class OffloadingConnector(KVConnectorBase_V1, SupportsHMA)", 53),
            "prefix-cacheable groups; Mamba pages registered whole; sliding window window-sized",
        ),
        ConnectorRule(
            "SimpleCPUOffloadConnector",
            "simple_cpu_offload_connector",
            True,
            "offload",
            True,
            _c("simple_cpu_offload_connector.py", "class SimpleCPUOffloadConnector(..., SupportsHMA)", 80),
            "VLLM_USE_SIMPLE_KV_OFFLOAD=1 with --kv-offloading-backend native",
        ),
        ConnectorRule(
            "LMCacheConnectorV1",
            "lmcache_connector",
            False,
            "offload",
            False,
            _c("lmcache_connector.py", "class LMCacheConnectorV1(KVConnectorBase_V1)", 68),
        ),
        ConnectorRule(
            "LMCacheMPConnector",
            "lmcache_mp_connector",
            False,
            "offload",
            False,
            LMCACHE_MP_ONE_GROUP,
            "raises unless --disable-hybrid-kv-cache-manager leaves one group",
        ),
        ConnectorRule(
            "FlexKVConnectorV1",
            "flexkv_connector",
            False,
            "offload",
            False,
            _c("flexkv_connector.py", "class FlexKVConnectorV1(KVConnectorBase_V1)", 35),
        ),
        ConnectorRule(
            "HF3FSKVConnector",
            "hf3fs.hf3fs_connector",
            False,
            "offload",
            False,
            _c("hf3fs/hf3fs_connector.py", "class HF3FSKVConnector(KVConnectorBase_V1)", 466),
        ),
        ConnectorRule(
            "ExampleConnector",
            "example_connector",
            False,
            "other",
            False,
            _c("example_connector.py", "class ExampleConnector(KVConnectorBase_V1)", 85),
        ),
        ConnectorRule("NixlConnector", "nixl", True, "pd", True, NIXL_CONV, "NixlConnector = NixlPullConnector"),
        ConnectorRule("NixlPullConnector", "nixl", True, "pd", True, NIXL_CONV),
        ConnectorRule("NixlPushConnector", "nixl", True, "pd", True, NIXL_CONV),
        ConnectorRule(
            "MooncakeConnector",
            "mooncake.mooncake_connector",
            True,
            "pd",
            True,
            _c("mooncake/mooncake_connector.py", "class MooncakeConnector(..., SupportsHMA)", 723),
            "GDN tested upstream, Mamba2 not validated (mooncake_connector.py:953-954)",
        ),
        ConnectorRule(
            "MooncakeStoreConnector",
            "mooncake.store.connector",
            True,
            "offload",
            True,
            _c("mooncake/store/connector.py", "MambaSpec needs mamba_cache_mode align", 127, 152),
        ),
        ConnectorRule(
            "MoRIIOConnector",
            "moriio.moriio_connector",
            True,
            "pd",
            True,
            _c("moriio/moriio_connector.py", "class MoRIIOConnector(..., SupportsHMA)", 271, 305),
        ),
        ConnectorRule(
            "MultiConnector",
            "multi_connector",
            True,
            "other",
            True,
            _c("multi_connector.py", "HMA only if every child supports it", 133),
        ),
        ConnectorRule(
            "DecodeBenchConnector",
            "decode_bench_connector",
            True,
            "other",
            False,
            _c("decode_bench_connector.py", "benchmark filler: moves no state", 138),
        ),
        ConnectorRule(
            "ExampleHiddenStatesConnector",
            "example_hidden_states_connector",
            True,
            "other",
            False,
            _c("example_hidden_states_connector.py", "hidden states, not KV", 99),
        ),
        ConnectorRule(
            "HiSparseConnector",
            "hisparse.connector",
            True,
            "other",
            False,
            _c("hisparse/connector.py", "HiSparse host pool", 221),
        ),
    )
}
