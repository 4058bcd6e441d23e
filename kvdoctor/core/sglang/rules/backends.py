"""The GPU generation: which attention backend SGLang picks when the launch names none, and the page
and hardware rules that come with it."""

from __future__ import annotations

from kvdoctor.core.sglang.rules.citations import cite

# kvdoctor models a CUDA build on Hopper ("sm90") or Blackwell ("sm100", the default, as the engine
# adapter's GpuArch.SM100). A model override picks first (when every backend flag is unset), then
# get_default_attn_backend fills an unset --attention-backend; the page rules of ``kv_dtypes`` then apply.
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
# IQuest Q1 (and its MTP draft) applies its attention sink from the softmax LSE: its override fills every unset
# backend with FA3, whichever backend flags are set (any other backend is refused: rules.REFUSALS).
IQUEST_Q1_ARCHS = frozenset({"IQuestQ1ForCausalLM", "IQuestQ1MTP"})
IQUEST_Q1_BACKEND = "fa3"
IQUEST_Q1_BACKEND_SOURCE = cite("srt/arg_groups/model_overrides/iquest_q1.py", "attention_backend", 41, 49)
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
