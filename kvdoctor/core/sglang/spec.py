"""``StateSpec``: every piece of per-request state a model carries under the given server flags.

The spec is the one description both ``inspect`` (bytes, hazards) and ``roundtrip`` (real pools on
a device) are built from, so the two can never disagree about what a request's state is.
"""

from __future__ import annotations

import dataclasses
import math

from kvdoctor._exceptions import ConfigError, FlagError
from kvdoctor.core.config import ModelConfig
from kvdoctor.core.record import record
from kvdoctor.core.sglang import geometry, rules
from kvdoctor.core.sglang.families import Classification
from kvdoctor.core.sglang.flags import ServerFlags

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "uint8": 1}
PER_TOKEN = "per_token"
PER_REQUEST = "per_request"


@record(frozen=True)
class Component:
    """One kind of state: where it lives, how it is indexed, and what one unit of it weighs."""

    name: str  # full_kv, swa_kv, mla_kv, full_kv_scales, swa_kv_scales, conv_state, temporal_state
    sub_pool: str  # "full" | "swa" | "mamba": which pool of the layout holds it
    index: str  # PER_TOKEN or PER_REQUEST
    dtype: str
    layers: int
    shapes: tuple[geometry.Shape, ...]  # per token (or per request), per layer
    bits_per_element: int

    @property
    def elements_per_layer(self) -> int:
        return sum(math.prod(shape) for shape in self.shapes)

    @property
    def bytes(self) -> int:
        """Bytes per token (PER_TOKEN) or per request (PER_REQUEST), summed over layers."""
        return self.elements_per_layer * self.layers * self.bits_per_element // 8


@record(frozen=True)
class KVDtype:
    """The resolved ``--kv-cache-dtype``: what the payload is, and its block scales if any."""

    flag: str
    payload: str
    store_dtype: str  # torch dtype name of the pool buffers
    payload_bits: int
    scale_block: int | None
    mha_pool: str

    @property
    def block_scaled(self) -> bool:
        return self.scale_block is not None


@record(frozen=True)
class StateSpec:
    """The model's state under the flags: geometry of each pool and the component list."""

    classification: Classification
    kv_dtype: KVDtype
    full: geometry.AttentionGeometry | None
    swa: geometry.AttentionGeometry | None
    recurrent: geometry.RecurrentGeometry | None
    sliding_window: int | None
    tp_size: int
    num_layers: int
    components: tuple[Component, ...]
    architectures: tuple[str, ...] = ()
    dsa_tail: bool = False  # a DSA pool keeping pooled index-key tails (index_kpool > 1, compressed)
    dsv4_request_state: bool = False  # DeepSeek-V4 request-scoped compressor state (a c128 layer)

    def component(self, name: str) -> Component | None:
        return next((c for c in self.components if c.name == name), None)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.components)

    def bytes_per_token(self, sub_pool: str) -> int:
        return sum(c.bytes for c in self.components if c.sub_pool == sub_pool and c.index == PER_TOKEN)

    @property
    def bytes_per_mamba_slot(self) -> int:
        return sum(c.bytes for c in self.components if c.index == PER_REQUEST)


def _stated_dtype(mapping: object) -> str | None:
    """The dtype a config mapping states itself (``dtype``, or its older spelling ``torch_dtype``)."""
    if not isinstance(mapping, dict):
        return None
    raw = mapping.get("dtype") or mapping.get("torch_dtype")
    return None if raw is None else str(raw).removeprefix("torch.")


def model_dtype(cfg: ModelConfig, requested: str = "auto") -> str:
    """The dtype SGLang serves the model in, which an "auto" KV dtype follows.

    _get_and_verify_dtype (``rules.MODEL_DTYPE_SOURCE``) reads the *text* config's dtype: the one it
    states, else the one transformers hands it from the top level, else its config class's default
    (``rules.CLASS_DEFAULT_DTYPES``). A float32 or missing dtype is served in float16, except Gemma
    (judged by the text config's model_type) in bfloat16; ``--dtype`` other than auto wins.
    """
    if requested != "auto":
        return rules.DTYPE_ALIASES.get(requested, requested)
    raw = (
        _stated_dtype(dict(cfg.text))
        or _stated_dtype(dict(cfg.top))
        or rules.CLASS_DEFAULT_DTYPES.get(cfg.text_model_type)
        or rules.CLASS_DEFAULT_DTYPES.get(cfg.model_type)
        or "float32"
    )
    dtype = rules.DTYPE_ALIASES.get(raw, raw)
    if dtype == "float32":
        return "bfloat16" if cfg.text_model_type.startswith("gemma") else "float16"
    return dtype


def resolve_kv_dtype(cfg: ModelConfig, flag: str, requested_dtype: str = "auto", *, dsv4: bool = False) -> KVDtype:
    if flag == "auto" and dsv4:  # DeepSeek-V4 defaults its KV cache to fp8 (rules.DSV4_KV_DTYPE_SOURCE)
        flag = rules.DSV4_KV_DTYPE_AUTO
    if flag == "auto":
        dtype = model_dtype(cfg, requested_dtype)
        if dtype not in DTYPE_BYTES:
            raise FlagError(f"{cfg.source}: model dtype '{dtype}' is not a KV dtype kvdoctor models")
        return KVDtype(flag, dtype, dtype, DTYPE_BYTES[dtype] * 8, None, "MHATokenToKVPool")
    rule = rules.KV_DTYPES[flag]
    return KVDtype(flag, rule.storage, rule.store_dtype, rule.payload_bits, rule.scale_block, rule.mha_pool)


def _kv_components(name: str, sub_pool: str, geo: geometry.AttentionGeometry, kv: KVDtype) -> list[Component]:
    parts = [Component(name, sub_pool, PER_TOKEN, kv.payload, geo.layers, geo.shapes, kv.payload_bits)]
    # An MXFP8 MLA pool does not exist (hazard KVD007); FP4 MLA keeps scales beside the latent row.
    if kv.scale_block is not None and not (geo.mla and kv.mha_pool == rules.MXFP8_POOL):
        scale_shapes = tuple((h, max(1, d // kv.scale_block)) for h, d in geo.shapes)
        scale_dtype = rules.SCALE_DTYPES.get(kv.flag, rules.SCALE_DTYPE_FALLBACK)
        parts.append(Component(f"{sub_pool}_kv_scales", sub_pool, PER_TOKEN, scale_dtype, geo.layers, scale_shapes, 8))
    return parts


def _recurrent_components(rec: geometry.RecurrentGeometry) -> list[Component]:
    parts = []
    if any(math.prod(s) for s in rec.conv_shapes):
        parts.append(
            Component(
                "conv_state",
                "mamba",
                PER_REQUEST,
                rec.conv_dtype,
                rec.layers,
                rec.conv_shapes,
                DTYPE_BYTES[rec.conv_dtype] * 8,
            )
        )
    if math.prod(rec.temporal_shape):
        parts.append(
            Component(
                "temporal_state",
                "mamba",
                PER_REQUEST,
                rec.temporal_dtype,
                rec.layers,
                (rec.temporal_shape,),
                DTYPE_BYTES[rec.temporal_dtype] * 8,
            )
        )
    return parts


def loop_count(cfg: ModelConfig) -> int:
    """How many times a loop model runs its layers (``rules.LOOP_LAYERS_SOURCE``): the config's ``loop_num``,
    else ``num_loops``, else its class's default (``rules.NANBEIGE_LOOPS_SOURCE``), else 1; 0 counts as 1."""
    for key in rules.LOOP_COUNT_FIELDS:
        if key in cfg.text or key in cfg.top:
            return cfg.positive_int(key) if cfg.get(key) else 1
    return rules.CLASS_DEFAULT_LOOPS.get(cfg.model_type, 1)


def attention_layer_count(cfg: ModelConfig) -> int:
    """KV-pool layers: one per layer, two per LongCat-Flash layer (``rules.LONGCAT_ATTENTION_LAYERS_SOURCE``),
    one per layer and loop of a loop model (``rules.LOOP_LAYERS_SOURCE``)."""
    layers = cfg.positive_int("num_hidden_layers")
    if set(cfg.architectures) & rules.LONGCAT_ARCHS:
        return 2 * layers
    return layers * loop_count(cfg)


def _swa_geometry(cfg: ModelConfig, swa_ids: tuple[int, ...], tp: int) -> geometry.AttentionGeometry:
    if cfg.text_model_type in rules.GEMMA4_TEXT_MODEL_TYPES:
        _, (head_dim, heads) = geometry.gemma4_shapes(cfg, tp)
        return geometry.AttentionGeometry(swa_ids, heads, head_dim, head_dim)
    base = geometry.mha(cfg, swa_ids, tp)
    swa_head_dim = int(cfg.get("swa_head_dim") or base.head_dim)
    swa_heads = cfg.get("swa_num_key_value_heads")
    return geometry.AttentionGeometry(
        swa_ids,
        max(1, int(swa_heads) // tp) if swa_heads else base.kv_heads,
        swa_head_dim,
        int(cfg.get("swa_v_head_dim") or swa_head_dim),
    )


def _full_geometry(cfg: ModelConfig, cls: Classification, full_ids: tuple[int, ...], tp: int):
    if cls.is_mla:
        return geometry.mla(cfg, full_ids)
    if cfg.text_model_type in rules.GEMMA4_TEXT_MODEL_TYPES:  # one pool or two, full layers keep their shape
        (head_dim, heads), _ = geometry.gemma4_shapes(cfg, tp)
        return geometry.AttentionGeometry(full_ids, heads, head_dim, head_dim)
    return geometry.mha(cfg, full_ids, tp)


def _attention_geometry(cfg: ModelConfig, cls: Classification, flags: ServerFlags):
    """(full, swa, recurrent) geometry for the model under the flags."""
    tp = flags.attention_tp_size
    recurrent = None
    if cls.uses_ssm_state:
        split = geometry.recurrent_split(cls.family, cfg, tp, scattered_sconv=flags.enable_scattered_sconv)
        full_ids, swa_ids, recurrent = split.full, split.swa, split.recurrent
        if flags.mamba_ssm_dtype and recurrent is not None and cls.family != "inkling":
            # --mamba-ssm-dtype lands in SGLANG_MAMBA_SSM_DTYPE, which wins over the config
            # (arg_groups/serving_hook.py:439-440); Inkling's dtypes are fixed (inkling.py:253).
            recurrent = dataclasses.replace(recurrent, temporal_dtype=flags.mamba_ssm_dtype)
    elif cls.is_hybrid_swa:
        rule = next(
            (rules.SWA_LAYER_RULES[a] for a in cfg.architectures if a in rules.SWA_LAYER_RULES),
            rules.SWA_LAYER_DEFAULT_RULE,
        )
        full_ids, swa_ids = geometry.swa_split(cfg, rule)
    else:
        full_ids, swa_ids = tuple(range(attention_layer_count(cfg))), ()
    if not cls.is_hybrid_swa:  # SWA layers stay in the one pool unless SGLang splits them out
        full_ids, swa_ids = tuple(sorted(set(full_ids) | set(swa_ids))), ()
    full = _full_geometry(cfg, cls, full_ids, tp) if full_ids else None
    swa = _swa_geometry(cfg, swa_ids, tp) if swa_ids else None
    return full, swa, recurrent


def _dsv4_components(
    cfg: ModelConfig, kv: KVDtype
) -> tuple[geometry.AttentionGeometry, geometry.AttentionGeometry, list[Component]]:
    """DeepSeek-V4's own pool (``rules.DSV4_POOL_SOURCE``): a sliding-window row per token in every
    layer, and in compressed layers a c4 / c128 row for every 4 / 128 tokens (shown amortised per
    token). The compressor's per-request state is not sized here."""
    ratios = geometry.dsv4_compression(cfg)
    row = geometry.default_head_dim(cfg)
    every = tuple(range(len(ratios)))
    compressed = tuple(i for i, r in enumerate(ratios) if r > 0)
    swa = geometry.AttentionGeometry(every, 1, row, 0, mla=True)
    full = geometry.AttentionGeometry(compressed, 1, row, 0, mla=True)
    parts = [Component("swa_kv", "swa", PER_TOKEN, kv.payload, len(every), ((1, row),), kv.payload_bits)]
    for ratio in sorted({r for r in ratios if r > 0}):
        layers = sum(1 for r in ratios if r == ratio)
        parts.append(
            Component(
                f"c{ratio}_kv", "full", PER_TOKEN, kv.payload, layers, ((1, max(1, row // ratio)),), kv.payload_bits
            )
        )
    return full, swa, parts


def sliding_window(cfg: ModelConfig) -> int | None:
    window = cfg.get("sliding_window_size") or cfg.get("sliding_window")
    return int(window) if window else None


def build_spec(cfg: ModelConfig, cls: Classification, flags: ServerFlags) -> StateSpec:
    """Derive the state spec of CFG (classified as CLS) under FLAGS."""
    kv = resolve_kv_dtype(cfg, flags.kv_cache_dtype, flags.dtype, dsv4=cls.is_dsv4)
    parts: list[Component] = []
    if cls.is_dsv4:
        full, swa, parts = _dsv4_components(cfg, kv)
        recurrent = None
    else:
        full, swa, recurrent = _attention_geometry(cfg, cls, flags)
    if full is not None and not cls.is_dsv4:
        parts += _kv_components("mla_kv" if full.mla else "full_kv", "full", full, kv)
        if cls.is_dsa:  # the indexer's key cache rides in the same pool, per token and layer
            parts.append(
                Component(
                    "dsa_index_k", "full", PER_TOKEN, "uint8", full.layers, ((1, geometry.dsa_index_row(cfg)),), 8
                )
            )
    if swa is not None and not cls.is_dsv4:
        parts += _kv_components("swa_kv", "swa", swa, kv)
    if recurrent is not None:
        parts += _recurrent_components(recurrent)
    if not parts:
        raise ConfigError(f"{cfg.source}: no attention or recurrent layers found (check the layer fields)")
    return StateSpec(
        classification=cls,
        kv_dtype=kv,
        full=full,
        swa=swa,
        recurrent=recurrent,
        sliding_window=sliding_window(cfg),
        tp_size=flags.tp_size,
        num_layers=cfg.positive_int("num_hidden_layers"),
        components=tuple(parts),
        architectures=cfg.architectures,
        dsa_tail=cls.is_dsa and cfg.positive_int("index_kpool", 1) > 1 and bool(cfg.get("index_kpool_compress")),
        dsv4_request_state=cls.is_dsv4 and 128 in geometry.dsv4_compression(cfg),
    )
