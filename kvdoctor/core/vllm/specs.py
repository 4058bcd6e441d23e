"""One KV cache spec per layer, as vLLM 0.33's layers report them (``get_kv_cache_spec``), from config.json.

A ``LayerSpec`` mirrors the fields of vLLM's spec classes that decide bytes and grouping (block size,
heads, head sizes, dtype, sliding window, Mamba state shapes/dtypes, page padding), with vLLM's
``page_size_bytes`` restated. Shapes are per TP rank, as vLLM allocates them. Hybrid attention/Mamba
models get vLLM's block-size alignment (``platforms/interface.py:940-1131``): the attention block grows
until one attention page holds a Mamba state, and the Mamba page is padded to the attention page.
"""

from __future__ import annotations

import math
from dataclasses import replace
from enum import Enum

from kvdoctor._exceptions import ConfigError, FlagError, UnknownModelError
from kvdoctor.core.config import ModelConfig
from kvdoctor.core.model_types import check_model_type
from kvdoctor.core.record import record
from kvdoctor.core.vllm import rules
from kvdoctor.core.vllm._generated.architectures import VLLM_ARCHITECTURES
from kvdoctor.core.vllm._generated.model_types import VLLM_MODEL_TYPES
from kvdoctor.core.vllm.flags import VllmFlags
from kvdoctor.core.vllm.model_len import ModelLength, max_model_len

Shape = tuple[int, ...]
DTYPE_BYTES = {
    "bfloat16": 2,
    "float16": 2,
    "float32": 4,
    "uint8": 1,
    "int8": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}


class SpecKind(str, Enum):
    """vLLM's spec class of a layer (``v1/kv_cache_interface.py``)."""

    FULL = "FullAttentionSpec"
    SLIDING = "SlidingWindowSpec"
    MLA = "MLAAttentionSpec"
    MAMBA = "MambaSpec"
    CIRCULAR = "CircularBufferSpec"

    @property
    def is_attention(self) -> bool:
        return self is not SpecKind.MAMBA


@record(frozen=True)
class LayerSpec:
    """One layer's KV cache spec, restating the vLLM fields that decide bytes and grouping."""

    kind: SpecKind
    block_size: int
    num_kv_heads: int = 0
    head_size: int = 0
    head_size_v: int = 0
    dtype: str = "bfloat16"
    state_content_bytes: int | None = None  # packed layouts (NVFP4: payload + block scales; per-token-head: + fp32)
    sliding_window: int | None = None
    shapes: tuple[Shape, ...] = ()
    dtypes: tuple[str, ...] = ()
    page_size_padded: int | None = None
    block_scaled: bool = False
    token_head_scales: bool = False  # each (token, head) cell carries an fp32 scale per side (rules.PER_TOKEN_HEAD)

    @property
    def unpadded_page_size_bytes(self) -> int:
        if self.kind is SpecKind.MAMBA:
            return sum(math.prod(s) * DTYPE_BYTES[d] for s, d in zip(self.shapes, self.dtypes, strict=True))
        per_state = self.state_content_bytes or (self.head_size + self.head_size_v) * DTYPE_BYTES[self.dtype]
        return self.num_kv_heads * self.block_size * per_state

    @property
    def page_size_bytes(self) -> int:
        """``page_size_bytes``: AttentionSpec (kv_cache_interface.py:583-596), MambaSpec (1118-1130)."""
        return self.page_size_padded if self.page_size_padded is not None else self.unpadded_page_size_bytes

    @property
    def bytes_per_token(self) -> int | None:
        """Attention: bytes each token costs in this layer; None for per-request Mamba state."""
        return None if self.kind is SpecKind.MAMBA else self.unpadded_page_size_bytes // self.block_size

    @property
    def prefix_cacheable(self) -> bool:
        """Only CircularBufferSpec opts out (kv_cache_interface.py:997-1000)."""
        return self.kind is not SpecKind.CIRCULAR

    def describe(self) -> str:
        if self.kind is SpecKind.MAMBA:
            return " + ".join(f"{'x'.join(map(str, s))} {d}" for s, d in zip(self.shapes, self.dtypes, strict=True))
        if self.kind is SpecKind.MLA:
            return f"1 latent x {self.head_size} {self.dtype}"
        text = f"{self.num_kv_heads} heads x ({self.head_size}+{self.head_size_v}) {self.dtype}"
        if self.token_head_scales and self.state_content_bytes is not None:
            data = self.state_content_bytes - 2 * rules.PER_TOKEN_HEAD_SCALE_BYTES  # both sides' data bytes
            if data < (self.head_size + self.head_size_v) * DTYPE_BYTES[self.dtype]:  # int4: two values a byte
                half = data // 2
                text = f"{self.num_kv_heads} heads x ({self.head_size}+{self.head_size_v}) int4 in ({half}+{half})"
                text += f" {self.dtype}"
            text += " + fp32 scale per token, head and side"
        return text + (f", window {self.sliding_window}" if self.sliding_window else "")


@record(frozen=True)
class ModelSpecs:
    """Every layer's spec, keyed by layer name in model order, and how they were derived."""

    family: rules.Family
    architecture: str
    layers: dict[str, LayerSpec]
    block_size: int
    block_size_reason: str
    mamba_page_padded_from: int | None = None  # the Mamba state bytes before padding to the attention page
    max_model_len: ModelLength | None = None  # the length vLLM runs with (model_len.py)

    @property
    def mamba_block_size(self) -> int | None:
        """The block of every MambaSpec (None without Mamba layers)."""
        return next((s.block_size for s in self.layers.values() if s.kind is SpecKind.MAMBA), None)

    @property
    def has_mamba(self) -> bool:
        return any(s.kind is SpecKind.MAMBA for s in self.layers.values())

    @property
    def has_attention(self) -> bool:
        return any(s.kind.is_attention for s in self.layers.values())

    @property
    def is_hybrid(self) -> bool:
        return self.has_mamba and self.has_attention


def classify(cfg: ModelConfig) -> rules.Family:
    """The family of CFG's architecture; exit 2 when vLLM 0.33 (or kvdoctor's vLLM rules) do not know it."""
    arch = cfg.architecture
    if arch in rules.REMOVED_ARCHITECTURES:
        raise UnknownModelError(
            f"{cfg.source}: architecture '{arch}' is not one vLLM {rules.RULES_REVISION} registers: vLLM supported it "
            f"until v{rules.REMOVED_ARCHITECTURES[arch]} ({rules.REMOVED_WHERE}): serve it with that vLLM"
        )
    if arch not in VLLM_ARCHITECTURES:
        raise UnknownModelError(
            f"{cfg.source}: architecture '{arch or '?'}' is not one vLLM {rules.RULES_REVISION} "
            "registers (model_executor/models/registry.py)"
        )
    check_model_type(
        cfg,
        VLLM_MODEL_TYPES,
        f"vLLM {rules.VLLM_VERSION}",
        f"vllm/{rules.CONFIG_LOADER.path}:{rules.CONFIG_LOADER.lines}",
    )
    family = rules.FAMILIES.get(arch)
    if family is None and arch in rules.UNMODELLED:
        gap = rules.UNMODELLED[arch]
        raise UnknownModelError(
            f"{cfg.source}: vLLM serves '{arch}', but kvdoctor's vLLM rules do not model {gap.missing} ({gap.where})"
        )
    if family is None:
        modelled = ", ".join(sorted(rules.FAMILIES))
        raise UnknownModelError(
            f"{cfg.source}: vLLM serves '{arch}', but kvdoctor's vLLM rules do not model its "
            f"state yet (modelled: {modelled})"
        )
    return family


def model_dtype(cfg: ModelConfig, flags: VllmFlags) -> str:
    """``--dtype auto`` → the config's torch_dtype (float32 checkpoints are served in bfloat16)."""
    name = flags.dtype if flags.dtype != "auto" else str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    name = {"half": "float16", "float": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(name, name)
    if flags.dtype == "auto" and name == "float32":
        name = "bfloat16"
    if name not in rules.MODEL_DTYPES:
        known = ", ".join(rules.MODEL_DTYPES)
        raise FlagError(f"vLLM flags: --dtype {name} is not a model dtype kvdoctor models ({known})")
    return name


def kv_dtype(cfg: ModelConfig, flags: VllmFlags) -> tuple[str, bool]:
    """(the KV element dtype, block-scaled) for ``--kv-cache-dtype`` (auto → the model dtype)."""
    flag = flags.kv_cache_dtype
    if flag == "auto":
        return model_dtype(cfg, flags), False
    if flag in rules.BLOCK_SCALED_KV_DTYPES:
        return "uint8", True
    if flag in rules.PER_TOKEN_HEAD:
        return rules.PER_TOKEN_HEAD[flag].dtype, False
    width = rules.KV_DTYPE_BYTES.get(flag)
    if width is None:
        raise FlagError(f"--kv-cache-dtype {flag}: a packed KV layout kvdoctor's vLLM rules do not model")
    return {2: flag if flag in DTYPE_BYTES else "bfloat16", 1: "float8_e4m3fn"}[int(width)], False


def token_head_content(flag: str, head: int, head_v: int) -> int:
    """Bytes of one (token, head) cell under per-token-head FLAG: both sides' data and an fp32 scale each
    (TritonAttentionBackend.customize_spec, rules.PER_TOKEN_HEAD_CONTENT; int4 packs two values a byte)."""
    mode = rules.PER_TOKEN_HEAD[flag]
    data = (head // mode.per_byte + head_v // mode.per_byte) * DTYPE_BYTES[mode.dtype]
    return data + 2 * rules.PER_TOKEN_HEAD_SCALE_BYTES


def _kv_heads(cfg: ModelConfig, tp: int) -> int:
    """ModelConfig.get_num_kv_heads: max(1, total // tp)."""
    total = int(cfg.get("num_key_value_heads") or cfg.positive_int("num_attention_heads"))
    return max(1, total // tp)


def _head_size(cfg: ModelConfig) -> int:
    if cfg.architecture in rules.HEAD_FROM_HIDDEN:  # rules.GRANITE_HYBRID_HEAD, JAMBA_HEAD, LFM2_HEAD: head_dim unread
        return cfg.positive_int("hidden_size") // cfg.positive_int("num_attention_heads")
    head = cfg.get("head_dim")
    return int(head) if head else cfg.positive_int("hidden_size") // cfg.positive_int("num_attention_heads")


def _divide(value: int, tp: int, what: str, cfg: ModelConfig) -> int:
    if value % tp:
        raise ConfigError(f"{cfg.source}: {what}={value} is not divisible by --tensor-parallel-size {tp}")
    return value // tp


def _layer_kinds(cfg: ModelConfig, family: rules.Family) -> list[str]:
    """'full' / 'sliding' / 'mamba' / 'none' per layer."""
    if family is rules.Family.MAMBA2_HYBRID and cfg.get("hybrid_override_pattern") is None:
        return _nemotron_listed_kinds(cfg)
    layers = cfg.positive_int("num_hidden_layers")
    types = cfg.get("layer_types")
    if family is rules.Family.DENSE or family is rules.Family.MLA:
        return ["full"] * layers
    if family is rules.Family.MAMBA2_HYBRID:
        pattern = cfg.require("hybrid_override_pattern")
        if not isinstance(pattern, str) or len(pattern) != layers or set(pattern) - set("M*-E"):
            raise ConfigError(f"{cfg.source}: field 'hybrid_override_pattern' must be {layers} of M * - E")
        return [{"M": "mamba", "*": "full"}.get(ch, "none") for ch in pattern]
    if family is rules.Family.MAMBA2_LAYER_TYPES:  # rules.GRANITE_HYBRID_LAYERS
        return _granite_layer_kinds(cfg, layers)
    if family is rules.Family.MAMBA1_HYBRID:  # rules.JAMBA_LAYERS
        return _jamba_layer_kinds(cfg, layers)
    if family is rules.Family.SHORT_CONV_HYBRID:  # rules.LFM2_LAYERS
        return _lfm2_layer_kinds(cfg, layers)
    if isinstance(types, list):
        mapping = {"full_attention": "full", "sliding_attention": "sliding", "linear_attention": "mamba"}
        if len(types) < layers or any(t not in mapping for t in types[:layers]):
            raise ConfigError(f"{cfg.source}: field 'layer_types' must list one of {sorted(mapping)} per layer")
        return [mapping[t] for t in types[:layers]]
    if family is rules.Family.GDN:
        interval = cfg.positive_int("full_attention_interval", 4)
        return ["full" if (i + 1) % interval == 0 else "mamba" for i in range(layers)]
    if family is rules.Family.SWA_PATTERN:
        default = rules.GEMMA2_PATTERN if cfg.architecture.startswith("Gemma2") else 6
        pattern = cfg.positive_int("sliding_window_pattern", default)
        return ["full" if (i + 1) % pattern == 0 else "sliding" for i in range(layers)]
    raise ConfigError(f"{cfg.source}: field 'layer_types' is missing (needed for {cfg.architecture})")


def _nemotron_listed_kinds(cfg: ModelConfig) -> list[str]:
    """Nemotron-H without ``hybrid_override_pattern``: transformers' NemotronHConfig keeps the layers as
    ``layers_block_type`` (alias ``layer_types``; default linear_attention, moe, full_attention, mlp) and its
    ``hybrid_override_pattern`` property, which vLLM reads, spells them M E * -; vLLM makes one layer per letter
    (rules.NEMOTRON_H_LAYERS), whatever num_hidden_layers says."""
    listed = cfg.get("layers_block_type") or cfg.get("layer_types") or list(rules.NEMOTRON_H_DEFAULT_LAYERS)
    known = rules.NEMOTRON_H_LAYER_TYPES
    if not isinstance(listed, list) or not listed or any(t not in known for t in listed):
        raise ConfigError(f"{cfg.source}: field 'layers_block_type' must list one of {sorted(known)} per layer")
    return [known[t] for t in listed]


def _granite_layer_kinds(cfg: ModelConfig, layers: int) -> list[str]:
    """GraniteMoeHybrid's layer_types (legacy names remapped by transformers; absent: every layer Mamba2)."""
    types = cfg.get("layer_types")
    if types is None:
        return ["mamba"] * layers
    known = rules.GRANITE_LAYER_TYPES
    if not isinstance(types, list) or len(types) < layers or any(t not in known for t in types[:layers]):
        raise ConfigError(f"{cfg.source}: field 'layer_types' must list one of {sorted(known)} per layer")
    return [known[t] for t in types[:layers]]


def _jamba_layer_kinds(cfg: ModelConfig, layers: int) -> list[str]:
    """Jamba's layers_block_type (written, or JambaConfig's property from attn_layer_period / _offset)."""
    listed = cfg.get("layers_block_type")
    if listed is None:
        period = cfg.positive_int("attn_layer_period", rules.JAMBA_DEFAULTS["attn_layer_period"])
        offset = cfg.get("attn_layer_offset", rules.JAMBA_DEFAULTS["attn_layer_offset"])
        if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset < period:
            raise ConfigError(f"{cfg.source}: field 'attn_layer_offset' must be an integer in [0, attn_layer_period)")
        return ["full" if i % period == offset else "mamba" for i in range(layers)]
    known = {"attention": "full", "mamba": "mamba"}
    if not isinstance(listed, list) or len(listed) < layers or any(t not in known for t in listed[:layers]):
        raise ConfigError(f"{cfg.source}: field 'layers_block_type' must list one of {sorted(known)} per layer")
    return [known[t] for t in listed[:layers]]


def _lfm2_layer_kinds(cfg: ModelConfig, layers: int) -> list[str]:
    """LFM2's layer_types (absent: full_attn_idxs, every layer by default): full_attention or a ShortConv layer."""
    listed = cfg.get("layer_types")
    if listed is None:
        full = cfg.get("full_attn_idxs")
        full = set(range(layers)) if full is None else full
        if not isinstance(full, (list, set)) or not all(isinstance(i, int) for i in full):
            raise ConfigError(f"{cfg.source}: field 'full_attn_idxs' must be a list of layer indices")
        return ["full" if i in full else "mamba" for i in range(layers)]
    if not isinstance(listed, list) or len(listed) < layers or not all(isinstance(t, str) for t in listed):
        raise ConfigError(f"{cfg.source}: field 'layer_types' must list one layer type per layer")
    return ["full" if t == "full_attention" else "mamba" for t in listed[:layers]]


def _granite_mamba2(cfg: ModelConfig) -> tuple[int, int, int, int, int, int]:
    """(intermediate, heads, head_dim, groups, state, conv) of a GraniteMoeHybrid Mamba2 layer, transformers'
    defaults for absent fields (rules.GRANITE_MAMBA_DEFAULTS; mamba_d_head "auto": intermediate // heads)."""
    d = rules.GRANITE_MAMBA_DEFAULTS
    intermediate = cfg.positive_int("mamba_expand", rules.GRANITE_MAMBA_EXPAND) * cfg.positive_int("hidden_size")
    heads = cfg.positive_int("mamba_n_heads", d["mamba_n_heads"])
    head_dim = cfg.get("mamba_d_head")
    head_dim = intermediate // heads if head_dim in (None, "auto") else cfg.positive_int("mamba_d_head")
    groups = cfg.positive_int("mamba_n_groups", d["mamba_n_groups"])
    state, conv = (
        cfg.positive_int("mamba_d_state", d["mamba_d_state"]),
        cfg.positive_int("mamba_d_conv", d["mamba_d_conv"]),
    )
    return intermediate, heads, head_dim, groups, state, conv


def _mamba_spec(cfg: ModelConfig, family: rules.Family, flags: VllmFlags, dtype: str) -> LayerSpec:
    """Shapes: MambaStateShapeCalculator (mamba_utils.py:186-293), conv in the default SD layout."""
    tp = flags.tensor_parallel_size
    conv_dtype = dtype if flags.mamba_cache_dtype == "auto" else flags.mamba_cache_dtype
    ssm_flag = flags.mamba_ssm_cache_dtype
    if family is rules.Family.GDN:
        kh, vh = cfg.positive_int("linear_num_key_heads"), cfg.positive_int("linear_num_value_heads")
        kd, vd = cfg.positive_int("linear_key_head_dim"), cfg.positive_int("linear_value_head_dim")
        conv_dim = kd * kh * 2 + vd * vh
        conv = (cfg.positive_int("linear_conv_kernel_dim") - 1, _divide(conv_dim, tp, "GDN conv_dim", cfg))
        temporal: Shape = (_divide(vh, tp, "linear_num_value_heads", cfg), vd, kd)
        ssm = conv_dtype if ssm_flag == "auto" else ssm_flag
    elif family is rules.Family.MAMBA2_LAYER_TYPES:  # rules.GRANITE_HYBRID_STATE: mamba2_state_shape / _dtype
        intermediate, heads, head_dim, groups, state, kernel = _granite_mamba2(cfg)
        groups += 0 if groups % tp == 0 else tp - groups  # extra_groups_for_head_shards
        conv = (kernel - 1, _divide(intermediate + 2 * groups * state, tp, "Mamba2 conv_dim", cfg))
        temporal = (_divide(heads, tp, "mamba_n_heads", cfg), head_dim, state)
        ssm = conv_dtype if ssm_flag == "auto" else ssm_flag
    elif family is rules.Family.MAMBA1_HYBRID:  # rules.JAMBA_STATE: mamba1_state_shape / mamba1_state_dtype
        inner = cfg.positive_int("mamba_expand", rules.JAMBA_MAMBA_EXPAND) * cfg.positive_int("hidden_size")
        kernel = cfg.positive_int("mamba_d_conv", rules.JAMBA_DEFAULTS["mamba_d_conv"])
        state = cfg.positive_int("mamba_d_state", rules.JAMBA_DEFAULTS["mamba_d_state"])
        conv = (kernel - 1, _divide(inner, tp, "Mamba1 intermediate size", cfg))
        temporal = (_divide(inner, tp, "Mamba1 intermediate size", cfg), state)
        ssm = conv_dtype if ssm_flag == "auto" else ssm_flag
    elif family is rules.Family.SHORT_CONV_HYBRID:  # rules.LFM2_STATE: short_conv_state_shape / _dtype
        kernel = cfg.positive_int("conv_L_cache", rules.LFM2_CONV_L_CACHE)
        conv = (kernel - 1, _divide(cfg.positive_int("conv_dim"), tp, "conv_dim", cfg))
        return LayerSpec(SpecKind.MAMBA, block_size=0, shapes=(conv,), dtypes=(conv_dtype,))
    else:  # Nemotron-H Mamba2 (nemotron_h.py:780-810)
        heads, head_dim = cfg.positive_int("mamba_num_heads"), cfg.positive_int("mamba_head_dim")
        groups, state = cfg.positive_int("n_groups"), cfg.positive_int("ssm_state_size")
        groups += 0 if groups % tp == 0 else tp - groups  # extra_groups_for_head_shards
        conv_dim = heads * head_dim + 2 * groups * state
        conv = (cfg.positive_int("conv_kernel") - 1, _divide(conv_dim, tp, "Mamba2 conv_dim", cfg))
        temporal = (_divide(heads, tp, "mamba_num_heads", cfg), head_dim, state)
        # NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype: auto → config's, else float32.
        ssm = ssm_flag if ssm_flag != "auto" else str(cfg.get("mamba_ssm_cache_dtype") or rules.NEMOTRON_H_SSM_DTYPE)
    return LayerSpec(SpecKind.MAMBA, block_size=0, shapes=(conv, temporal), dtypes=(conv_dtype, ssm))


def _attention_spec(cfg: ModelConfig, kind: str, family: rules.Family, flags: VllmFlags, block: int) -> LayerSpec:
    dtype, scaled = kv_dtype(cfg, flags)
    token_head = flags.kv_cache_dtype in rules.PER_TOKEN_HEAD
    tp = flags.tensor_parallel_size
    if family is rules.Family.MLA:
        if scaled:
            raise FlagError("--kv-cache-dtype nvfp4 on an MLA model: vLLM's MLA uses nvfp4_ds_mla, not modelled")
        if token_head:
            raise FlagError(
                f"--kv-cache-dtype {flags.kv_cache_dtype} on an MLA model: no MLA backend of vLLM {rules.VLLM_VERSION} "
                f"lists it (only TRITON_ATTN does, {rules.PER_TOKEN_HEAD_BACKEND})"
            )
        latent = cfg.positive_int("kv_lora_rank") + int(cfg.get("qk_rope_head_dim") or 0)
        return LayerSpec(SpecKind.MLA, block, 1, latent, 0, dtype)
    head = _head_size(cfg)
    packed = None
    if scaled:
        packed = 2 * (head // 2 + head // 16)  # [K data | K scale | V data | V scale]
    elif token_head:
        packed = token_head_content(flags.kv_cache_dtype, head, head)  # [K | K scale | V | V scale], fp32 scales
    heads = _kv_heads(cfg, tp)
    marks = {"block_scaled": scaled, "token_head_scales": token_head}
    if kind == "sliding":
        window = cfg.positive_int("sliding_window")
        return LayerSpec(SpecKind.SLIDING, block, heads, head, head, dtype, packed, window, **marks)
    return LayerSpec(SpecKind.FULL, block, heads, head, head, dtype, packed, **marks)


def build_specs(cfg: ModelConfig, flags: VllmFlags) -> ModelSpecs:
    """Every layer's spec, named as vLLM names its layers (``model.layers.N.<mixer>``)."""
    family = classify(cfg)
    kinds = _layer_kinds(cfg, family)
    dtype = model_dtype(cfg, flags)
    block = flags.block_size or rules.DEFAULT_BLOCK_SIZE
    reason = "--block-size" if flags.block_size else f"CacheConfig.DEFAULT_BLOCK_SIZE ({rules.DEFAULT_BLOCK_SIZE})"
    length = max_model_len(cfg, flags.max_model_len)
    mamba = _mamba_spec(cfg, family, flags, dtype) if "mamba" in kinds else None
    padded_from = None
    if mamba is not None and any(k in ("full", "sliding") for k in kinds):
        block, reason, padded_from = _align_hybrid(cfg, family, flags, block, mamba, reason)
    layers: dict[str, LayerSpec] = {}
    for i, kind in enumerate(kinds):
        if kind == "none":
            continue
        if kind == "mamba":
            assert mamba is not None
            page = _attention_spec(cfg, "full", family, flags, block).page_size_bytes if padded_from else None
            mamba_block = _mamba_block(flags, block, length)
            layers[f"model.layers.{i}.mixer"] = replace(mamba, block_size=mamba_block, page_size_padded=page)
        else:
            layers[f"model.layers.{i}.self_attn.attn"] = _attention_spec(cfg, kind, family, flags, block)
    return ModelSpecs(family, cfg.architecture, layers, block, reason, padded_from, length)


def _mamba_block(flags: VllmFlags, block: int, length: ModelLength) -> int:
    """The MambaSpec block (rules.MAMBA_SPEC_BLOCK): with prefix caching the cache mode is ``align`` and the
    Mamba block the attention block (platforms/interface.py, rules.ALIGN_HYBRID); without it the mode is
    ``none`` and the block is ``max_model_len`` (rules.MAMBA_BLOCK_MAX_LEN), whatever --mamba-cache-mode says."""
    return block if flags.prefix_caching else length.tokens


def _align_hybrid(
    cfg: ModelConfig, family: rules.Family, flags: VllmFlags, block: int, mamba: LayerSpec, reason: str
) -> tuple[int, str, int | None]:
    """Platform._align_hybrid_block_size (platforms/interface.py:940-1131), FLASH_ATTN's kernel blocks."""
    per_token = _attention_spec(cfg, "full", family, flags, 1).page_size_bytes
    mamba_page = mamba.unpadded_page_size_bytes
    align = max(rules.KERNEL_BLOCK_ALIGNMENT, block)
    if family is rules.Family.MLA:
        align = max(align, rules.MLA_KERNEL_BLOCK_ALIGNMENT)
    needed = align * -(-mamba_page // (align * per_token))
    needed = rules.KERNEL_BLOCK_ALIGNMENT * -(-needed // rules.KERNEL_BLOCK_ALIGNMENT)
    if block < needed:
        block = needed
        reason = f"raised so one attention page ({per_token} B/token) holds a Mamba state ({mamba_page} B)"
    return block, reason, (mamba_page if block * per_token != mamba_page else None)
