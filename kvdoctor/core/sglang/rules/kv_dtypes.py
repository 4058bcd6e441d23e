"""KV cache and model dtypes (``srt/mem_cache/kv_cache_dtype.py``, ``memory_pool.py``): how each
``--kv-cache-dtype`` is stored, the MXFP8 scale layout, and the page sizes the backends force."""

from __future__ import annotations

from kvdoctor.core.cite import Source
from kvdoctor.core.record import record
from kvdoctor.core.sglang.rules.citations import cite

MXFP8_POOL = "MHATokenToKVPoolMXFP8"  # the only MXFP8 pool class: MHA rows, no MLA variant
MXFP8_ALIGNMENT = 32  # head_dim multiple (memory_pool.py MHATokenToKVPoolMXFP8)
MXFP8_POOL_SOURCE = cite("srt/mem_cache/memory_pool.py", "MHATokenToKVPoolMXFP8", 3847)
# The MXFP8 pool allocates its block scales as float8_e8m0fnu buffers (other block-scaled dtypes: e8m0
# exponents held in uint8).
SCALE_DTYPES: dict[str, str] = {"mxfp8": "float8_e8m0fnu"}
SCALE_DTYPE_FALLBACK = "uint8 (e8m0)"
SCALE_DTYPES_SOURCE = cite("srt/mem_cache/memory_pool.py", "float8_e8m0fnu", 3941, 3949)


@record(frozen=True)
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


# MXFP8 scale planes are page-interleaved only at page size 128, and the interleaved store packs four
# scales per word: head_dim 128 only.
MXFP8_INTERLEAVED_SOURCE = (
    cite("srt/mem_cache/memory_pool.py", "mxfp8_sf_interleaved", 3918, 3946),
    cite("kernels/ops/kvcache/mxfp8_interleave_sf.py", "hdim=128", 73, 77),
)
MXFP8_INTERLEAVED_PAGE = 128
MXFP8_INTERLEAVED_HEAD_DIM = 128
