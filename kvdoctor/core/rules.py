"""The SGLang rules kvdoctor models: one table-like module, one home for every rule.

Each entry restates (never copies) a rule of SGLang's own source at ``RULES_REVISION`` and names the
file and lines it mirrors, so that when SGLang moves a reviewer can re-check one table. Paths are
inside the ``sglang`` package of the wheel (``pip download --no-deps sglang==0.5.23``).
Everything else in ``kvdoctor.core`` evaluates these tables; none of it holds a rule of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

RULES_REVISION = "sglang==0.5.23 (retraction semantics of PR #35840, MXFP8 CPU offload of #35888)"


# --- Recurrent-state predicates: srt/configs/hybrid_arch.py and kv_cache_builder.uses_ssm_state ---


@dataclass(frozen=True)
class FamilyRule:
    """One row of the model_type → family table.

    ``predicate`` is the SGLang helper that recognises the config class registered for these
    model types; ``condition`` names an extra field test the helper applies (see ``CONDITIONS``
    in ``families.py``); ``on_text_config`` says whether SGLang checks the unwrapped text config.
    """

    family: str
    model_types: tuple[str, ...]
    predicate: str
    source: str
    condition: str | None = None
    on_text_config: bool = False


FAMILY_RULES: tuple[FamilyRule, ...] = (
    FamilyRule(
        "gdn",
        ("qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text",
         "intern_s2_preview"),
        "hybrid_gdn_config", "srt/configs/hybrid_arch.py:55-67", on_text_config=True,
    ),
    FamilyRule("jet_gdn", ("jet_nemotron", "jet_vlm"), "hybrid_gdn_config",
               "srt/configs/hybrid_arch.py:55-67", on_text_config=True),
    FamilyRule("inkling", ("inkling_mm_model", "inkling_model"), "mamba2_config",
               "srt/configs/hybrid_arch.py:91-95 (mamba2_cache_params is never None)"),
    FamilyRule("nemotron_h", ("nemotron_h", "nemotron_h_puzzle", "NemotronH_Nano_VL_V2",
                              "NemotronH_Nano_Omni_Reasoning_V3", "nemotron_h_omni"),
               "mamba2_config", "srt/configs/hybrid_arch.py:72-97",
               condition="draft_pattern_has_mamba"),
    FamilyRule("falcon_h1", ("falcon_h1",), "mamba2_config", "srt/configs/hybrid_arch.py:78-90"),
    FamilyRule("lfm2", ("lfm2", "lfm2_moe", "lfm2_vl"), "mamba2_config",
               "srt/configs/hybrid_arch.py:78-90"),
    FamilyRule("granite_hybrid", ("granitemoehybrid",), "mamba2_config",
               "srt/configs/hybrid_arch.py:99-106", condition="any_layer_is_mamba"),
    FamilyRule("zaya", ("zaya",), "mamba2_config", "srt/configs/hybrid_arch.py:78-90"),
    FamilyRule("mamba2", ("mamba2",), "mamba2_config", "srt/configs/hybrid_arch.py:78-90"),
    FamilyRule("mamba1", ("mamba", "falcon_mamba"), "mamba2_config",
               "srt/configs/hybrid_arch.py:78-90"),
    FamilyRule("kda", ("kimi_linear",), "kimi_linear_config", "srt/configs/hybrid_arch.py:111-123"),
    FamilyRule("kda", ("kimi_k3",), "kimi_linear_config",
               "srt/configs/hybrid_arch.py:120-122 (text_config is a KimiLinearConfig; kimi_k3.py:80-95)"),
    FamilyRule("kda", ("bailing_hybrid",), "kimi_linear_config",
               "srt/configs/hybrid_arch.py:111-123", condition="bailing_uses_kda"),
    FamilyRule("lightning", ("bailing_hybrid",), "hybrid_lightning_config",
               "srt/configs/hybrid_arch.py:46-52", condition="bailing_not_kda"),
    FamilyRule("lightning", ("minicpm_sala",), "hybrid_lightning_config",
               "srt/configs/hybrid_arch.py:46-52", condition="has_lightning_layers"),
    FamilyRule("glm5_next", ("glm5_next",), "glm5_next_config", "srt/configs/hybrid_arch.py:126-133"),
    FamilyRule("gdn", ("gigachat3_5",), "linear_attn_model_spec",
               "srt/configs/gigachat35.py:236-252 (uses_mamba_radix_cache=True)"),
)  # fmt: skip

# Model types SGLang knows that carry attention KV only (matched when no FAMILY_RULES row applies).
# srt/utils/hf_transformers/common.py:117-191 plus the transformers models SGLang serves.
ATTENTION_ONLY_MODEL_TYPES: frozenset[str] = frozenset({
    "llama", "llama4", "llama4_text", "mistral", "mixtral", "qwen", "qwen2", "qwen2_moe", "qwen3",
    "qwen3_moe", "gemma", "gemma2", "gemma3", "gemma3_text", "gemma4", "gemma4_text", "gpt_oss",
    "deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "minicpm", "minicpm3", "phi3",
    "glm4", "glm4_moe", "olmo2", "exaone", "granite", "granitemoe", "step3p5", "mimo_v2_flash",
})  # fmt: skip


# --- Config normalisations SGLang's config classes apply before any rule reads them ---
# granitemoehybrid.py:29-32 (transformers >= 5.15 spellings) and 185-193 (default pattern).
GRANITE_LAYER_ALIASES = {"linear_attention": "mamba", "full_attention": "attention"}
GRANITE_DEFAULT_ATTENTION_EVERY = 6
# minicpm.py:6-15 and 95-104 (aliases, then tiled over num_hidden_layers).
MINICPM_MIXER_ALIASES = {
    "minicpm4": "minicpm4", "minicpm": "minicpm4", "standard": "minicpm4", "attention": "minicpm4",
    "attn": "minicpm4", "lightning": "lightning-attn", "lightning_attn": "lightning-attn",
    "lightning-attn": "lightning-attn",
}  # fmt: skip
LIGHTNING_MIXER = "lightning-attn"
# The per-layer kinds each reader counts; SGLang silently drops a layer of any other name, so kvdoctor
# refuses it (layer_types.py). granitemoehybrid.py:197-209 (validated there too), lfm2.py:42-51,
# jet_nemotron.py:42-56, model_config.py:2716-2770 (get_hybrid_layer_ids).
GRANITE_LAYER_KINDS = frozenset({"attention", "mamba"})
LFM2_LAYER_KINDS = frozenset({"full_attention", "conv", "short_conv"})
JET_LAYER_KINDS = frozenset({"attn", "swa", "jet"})
SWA_LAYER_KINDS = frozenset({"full_attention", "sliding_attention"})
# Step 3.5/3.7 list their MTP layers past num_hidden_layers and read only i < num_hidden_layers
# (model_config.py:2735-2749); every other config lists exactly one kind per layer.
LAYER_TYPES_LIST_MTP_ARCHS = frozenset({"Step3p5ForCausalLM", "Step3p7ForConditionalGeneration"})
# InklingStateDType is fixed (inkling.py:253, 418-422): no env or flag changes it.
INKLING_STATE_DTYPE = "bfloat16"
# Kimi-Linear numbers kda_layers from 1 (kimi_linear.py:158-182); GLM-5-Next from 0 (glm5_next.py:245-268).
KDA_ONE_BASED_MODEL_TYPES = frozenset({"kimi_linear", "kimi_k3"})
# Mamba2StateShape.create pads n_groups so every TP shard holds whole groups (mamba_utils.py:25-38).


# --- Hybrid SWA and MLA: srt/configs/model_config.py ---

# is_hybrid_swa_model (model_config.py:2651-2696, SWA_SINK_ARCHS at 88-96, MIMO_V2 at 74-77).
# Gemma 2/3 are absent: they run on the plain MHA pool with a window.
HYBRID_SWA_ARCHS: frozenset[str] = frozenset({
    "BeamForCausalLM", "Llama4ForConditionalGeneration", "DeepseekV4ForCausalLM",
    "DeepseekV4ForCausalLMNextN", "DeepseekV4ForCausalLMDSpark", "GptOssForCausalLM",
    "GraniteSWAForCausalLM", "GraniteMoeSWAForCausalLM", "IQuestQ1ForCausalLM", "IQuestQ1MTP",
    "MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM", "MiMoV2MTP", "Step3p5ForCausalLM", "Step3p5MTP",
    "Step3p7ForConditionalGeneration", "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration",
    "EmbeddingGemma2Model", "Gemma4UnifiedForConditionalGeneration",
    "DiffusionGemmaForBlockDiffusion", "LagunaForCausalLM", "MellumForCausalLM",
    "MuseGlimmerForCausalLM", "MuseGlimmerForConditionalGeneration",
    "InklingForConditionalGeneration", "InklingForConditionalGenerationMTP",
    "UnlimitedOCRForCausalLM",
})  # fmt: skip
HYBRID_SWA_SOURCE = "srt/configs/model_config.py:2651-2696 (and _derive_hybrid_model at 1214-1218)"

# How each hybrid-SWA architecture names its sliding layers (get_hybrid_layer_ids, 2700-2830).
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

# attention_arch = MLA by architecture name (model_config.py:1366-1515).
MLA_ARCHS: frozenset[str] = frozenset({
    "DeepseekV2ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM",
    "DeepseekV3ForCausalLMNextN", "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM",
    "Glm5NextForConditionalGeneration", "LongcatFlashForCausalLM", "HYV4ForCausalLM",
    "DotsVLMForCausalLM", "Dots3NoteForCausalLM", "MistralLarge3ForCausalLM",
    "KimiK25ForConditionalGeneration", "GigaChat35ForCausalLM", "MiniCPM3ForCausalLM",
    "DeepseekVL2ForCausalLM", "KimiVLForConditionalGeneration", "KimiLinearForCausalLM",
    "KimiK3LinearForCausalLM", "KimiK3ForConditionalGeneration", "BailingMoeV2_5ForCausalLM",
    "BailingMoeV3ForCausalLM", "SarvamMLAForCausalLM",
})  # fmt: skip
MLA_SOURCE = "srt/configs/model_config.py:1366-1515"


# --- KV cache dtypes: srt/mem_cache/kv_cache_dtype.py, memory_pool.py ---


@dataclass(frozen=True)
class KVDtypeRule:
    """How one ``--kv-cache-dtype`` is stored: payload bits per element, and its block scales."""

    payload_bits: int
    storage: str  # what the pool buffer holds, for people
    store_dtype: str  # the torch dtype of the pool buffer (SGLang stores plain fp8 as uint8)
    scale_block: int | None = None  # elements per scale byte, None when not block-scaled
    mha_pool: str = "MHATokenToKVPool"


KV_DTYPES: dict[str, KVDtypeRule] = {
    "bf16": KVDtypeRule(16, "bfloat16", "bfloat16"),
    "bfloat16": KVDtypeRule(16, "bfloat16", "bfloat16"),
    "fp8_e4m3": KVDtypeRule(8, "float8_e4m3fn as uint8", "uint8"),
    "fp8_e5m2": KVDtypeRule(8, "float8_e5m2 as uint8", "uint8"),
    # memory_pool.py:3900 (store dtype e4m3fn), scale buffers k_scale_buffer / v_scale_buffer.
    "mxfp8": KVDtypeRule(8, "float8_e4m3fn", "float8_e4m3fn", 32, "MHATokenToKVPoolMXFP8"),
    # FP4 runs on the plain MHA pool with an FP4 quant method (kv_cache_configurator.py:1905-1919).
    "nvfp4": KVDtypeRule(4, "packed fp4 as uint8", "uint8", 16),
    "fp4_mx_block16": KVDtypeRule(4, "packed fp4 as uint8", "uint8", 16),
}
# Spellings SGLang's _STR_DTYPE_TO_TORCH_DTYPE accepts for the model dtype (model_config.py).
DTYPE_ALIASES = {"half": "float16", "float": "float32", "bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
KV_DTYPES_SOURCE = "srt/mem_cache/kv_cache_dtype.py; memory_pool.py (MXFP8 and FP4 pools)"
MXFP8_POOL = "MHATokenToKVPoolMXFP8"  # the only MXFP8 pool class: MHA rows, no MLA variant
MXFP8_ALIGNMENT = 32  # head_dim multiple (memory_pool.py MHATokenToKVPoolMXFP8)
# FA4 on SM100 forces page size 128 for non-MLA models (arg_groups/overrides.py:1273-1297),
# except DiffusionGemma (page 1).
FA4_PAGE_SIZE = 128
# A hybrid-SWA model without full-attention layers runs on PureSWATokenToKVPoolAllocator, which
# asserts page_size == 1 (mem_cache/allocator/swa.py:727-740).
ALL_SWA_PAGE_SIZE = 1
FA4_PAGE_EXEMPT_ARCHS = frozenset({"DiffusionGemmaForBlockDiffusion"})
MXFP8_MIN_SM = 100  # SGLang's MXFP8 KV path needs SM100+ and the FA4 backend


# --- Pools and their CPU copies: srt/mem_cache/memory_pool.py, swa_memory_pool.py ---

# cpu_copy_carries_mamba: KVCache default False (memory_pool.py:2010); HybridLinearKVPool True (4231).
CARRIES_MAMBA: dict[str, bool] = {"HybridLinearKVPool": True}
CARRIES_MAMBA_SOURCE = "srt/mem_cache/memory_pool.py:2010 (KVCache) and 4231 (HybridLinearKVPool)"
MAMBA_BACKUP_SOURCE = "srt/managers/schedule_batch.py:2103 (_mamba_pool_needing_backup)"


# --- Retraction backup backend: srt/mem_cache/kv_cache_builder.py:186-261 ---
# "none" (arg_groups/fields/disagg.py:95-108) keeps no backup: the retracted request is aborted (503).


@dataclass(frozen=True)
class BackupCondition:
    """One conjunct of ``host_pool`` selection; every one must hold for host_pool."""

    name: str
    meaning: str
    source: str


BACKUP_CONDITIONS: tuple[BackupCondition, ...] = (
    BackupCondition("decode_server", "--disaggregation-mode decode (others keep cpu_tensor)",
                    "kv_cache_builder.py:236"),
    BackupCondition("not_hip", "not a ROCm build (large HIP restores can fault the GPU process)",
                    "kv_cache_builder.py:239"),
    BackupCondition("no_dcp", "decode context parallel off", "kv_cache_builder.py:240"),
    BackupCondition("no_decode_radix_cache", "--disaggregation-decode-enable-radix-cache off",
                    "kv_cache_builder.py:241"),
    BackupCondition("no_decode_offload", "--disaggregation-decode-enable-offload-kvcache off "
                    "(KV offload already owns a host pool)", "kv_cache_builder.py:243"),
    BackupCondition("no_priority_preemption", "priority scheduling off, or its preemption disabled",
                    "kv_cache_builder.py:230-233"),
    BackupCondition("no_recurrent_state", "the model keeps no recurrent/conv state "
                    "(host_pool has no recurrent-state sidecar)", "kv_cache_builder.py:173-183, 220"),
    BackupCondition("no_unified_hybrid_swa", "not unified memory on a hybrid-SWA model",
                    "kv_cache_builder.py:198, 219"),
    BackupCondition("unified_draft_ok", "no unified memory with MTP draft pools (unless DSpark)",
                    "kv_cache_builder.py:206-210"),
    BackupCondition("host_pool_kv_layout", "KV pool is an MHATokenToKVPool (subclasses too), or an "
                    "SWAKVPool with full tokens per layer > 0", "kv_cache_builder.py:221-224"),
)  # fmt: skip
HOST_POOL_LAYOUTS = ("MHATokenToKVPool", "MHATokenToKVPoolMXFP8", "MHATokenToKVPoolFP4")
BACKUP_ONLY_HICACHE_RATIO = 0.2  # kv_cache_builder.py:164
DEFAULT_HICACHE_RATIO = 2.0  # kv_cache_builder.py:260
HICACHE_RATIO_SOURCE = "srt/mem_cache/kv_cache_builder.py:245-261"
# What the host_pool backend moves: the unified tree's full and SWA components. Block scales ride
# along only in MHATokenToKVPoolMXFP8Host, chosen for the page-interleaved MXFP8 layout
# (pool_host/mha.py:1684-1698); FP4 and flat-layout MXFP8 fall back to the plain MHA host pool.
HOST_POOL_CARRIES = frozenset({"full_kv", "swa_kv", "mla_kv"})
HOST_POOL_SCALES_SOURCE = "srt/mem_cache/pool_host/mha.py:1684-1698, pool_host/mha_mxfp8.py"


# --- PD state types: srt/disaggregation/base/conn.py (class StateType) ---
# Pools whose block scales a PD transfer registers (disaggregation/utils.py:1513-1518, 1561-1568).
PD_BLOCK_SCALE_POOLS = frozenset({"MHATokenToKVPoolMXFP8"})
# A decode host-receive threshold below 1 declares this backend (arg_groups/pd_disaggregation_hook.py:68-80).
HOST_RECEIVE_BACKEND = "host_pool"
PD_STATE_TYPES_SOURCE = "srt/disaggregation/base/conn.py:14-41; disaggregation/utils.py"


# --- Pool sizing: srt/mem_cache/kv_cache_configurator.py ---
SIZING_SOURCE = (
    "srt/mem_cache/kv_cache_configurator.py:3229-3410 (mamba budget), "
    "model_executor/pool_configurator.py:656-921 (full/SWA split)"
)
# Fallbacks of the two ratio flags when nothing overrides them (arg_groups/fields/schedule.py:150-227).
SWA_FULL_TOKENS_RATIO_FALLBACK = 0.8
MAMBA_FULL_MEMORY_RATIO_FALLBACK = 0.9
# Model overrides applied when the user leaves a knob unset (arg_groups/model_overrides/*.py).
RATIO_OVERRIDES: dict[str, dict[str, float]] = {
    "inkling": {"swa_full_tokens_ratio": 0.1, "mamba_full_memory_ratio": 0.1},  # inkling.py:41-44
}
# Mamba slots per running request (kv_cache_configurator.py:3062-3088, allocation_sizing.py:11-19):
# 1 with the radix cache off (a PD decode server without its radix opt-in); otherwise 3, plus the
# tracking slots of the extra buffer (2 with the overlap schedule, 1 when lazy).
MAMBA_SLOTS_RADIX_OFF = 1
MAMBA_SLOTS_RADIX_BASE = 3
MAMBA_TRACKING_SLOTS = {"extra_buffer": 2, "extra_buffer_lazy": 1}
MAMBA_TRACKING_SLOTS_NO_OVERLAP = 1  # extra_buffer with --disable-overlap-schedule
# --mamba-radix-cache-strategy auto resolves to extra_buffer for these architectures when the overlap
# schedule is on or pages are larger than 1, else no_buffer (arg_groups/overrides.py:401-486).
MAMBA_EXTRA_BUFFER_ARCHS = frozenset({
    "KimiLinearForCausalLM", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
    "Qwen3_5MoeForCausalLM", "Qwen3_5ForCausalLM", "Qwen3NextForCausalLM", "Qwen4ExpForConditionalGeneration",
    "InternS2PreviewForConditionalGeneration", "MiniCPMV4_6ForConditionalGeneration",
    "MiniCPMV4_7ForConditionalGeneration", "BailingMoeV2_5ForCausalLM", "BailingMoeV3ForCausalLM",
    "BailingMoeV3VLForConditionalGeneration", "FalconH1ForCausalLM", "GraniteMoeHybridForCausalLM",
    "Glm5NextForConditionalGeneration", "NemotronHForCausalLM", "NemotronHPuzzleForCausalLM",
    "NemotronH_Omni_Reasoning_V3", "KimiK3ForConditionalGeneration", "InklingForConditionalGeneration",
    "InklingForConditionalGenerationMTP",
})  # fmt: skip
# The KV offload chunk of every pool's get_cpu_copy (memory_pool.py:2043-2044).
CPU_OFFLOAD_CHUNK = 8192
# MXFP8 scale planes are page-interleaved only at page size 128 (memory_pool.py:3918-3946), and the
# interleaved store packs four scales per word: head_dim 128 only
# (kernels/ops/kvcache/mxfp8_interleave_sf.py:73-77).
MXFP8_INTERLEAVED_PAGE = 128
MXFP8_INTERLEAVED_HEAD_DIM = 128
# KV dtypes whose pool CPU copy carries the block scales: only the MXFP8 pool overrides
# get_cpu_copy (memory_pool.py:4131-4186); the plain MHA/MLA copies move k/v (or the latent row)
# only (memory_pool.py:2791-2810, 5093-5111), leaving FP4 scales behind.
CPU_COPY_CARRIES_SCALES = frozenset({"mxfp8"})
