"""Per-layer tensor geometry of each family's state, from ``config.json`` fields.

These are the shapes SGLang allocates per TP rank: KV heads per rank for attention, and the
conv/temporal state shapes each family's ``mamba2_cache_params`` builds (``srt/configs/<family>.py``
and ``srt/configs/mamba_utils.py`` at ``rules.RULES_REVISION``). Everything is per rank, because
the pools are.
"""

from __future__ import annotations

from collections.abc import Callable

from kvdoctor._exceptions import ConfigError
from kvdoctor.core import config_checks
from kvdoctor.core.config import ModelConfig
from kvdoctor.core.record import record
from kvdoctor.core.sglang import rules
from kvdoctor.core.sglang.layer_types import (
    gigachat_layer_types,
    granite_layer_types,
    jet_layer_types,
    lfm2_layer_types,
    minicpm_mixer_types,
    nemotron_h_layer_types,
    qwen4_layer_types,
    swa_layer_types,
)
from kvdoctor.core.sglang.rules import SWA_LAYER_DEFAULT_RULE

Shape = tuple[int, ...]


@record(frozen=True)
class AttentionGeometry:
    """One attention sub-pool: which layers, and the K/V row each token stores per layer."""

    layer_ids: tuple[int, ...]
    kv_heads: int  # per TP rank
    head_dim: int
    v_head_dim: int  # 0 for MLA, whose latent row is one buffer
    mla: bool = False

    @property
    def layers(self) -> int:
        return len(self.layer_ids)

    @property
    def shapes(self) -> tuple[Shape, ...]:
        """Per-token, per-layer buffers: (K, V) for MHA, the latent row for MLA."""
        if self.mla:
            return ((1, self.head_dim),)
        return ((self.kv_heads, self.head_dim), (self.kv_heads, self.v_head_dim))


@record(frozen=True)
class RecurrentGeometry:
    """The request-indexed recurrent state of one mamba slot: conv and temporal, per layer."""

    layer_ids: tuple[int, ...]
    conv_shapes: tuple[Shape, ...]
    temporal_shape: Shape
    conv_dtype: str
    temporal_dtype: str

    @property
    def layers(self) -> int:
        return len(self.layer_ids)


@record(frozen=True)
class LayerSplit:
    """Which layers hold attention KV and which hold recurrent state."""

    full: tuple[int, ...]
    swa: tuple[int, ...]
    recurrent: RecurrentGeometry | None


def _per_rank(count: int, tp: int, what: str, source: str) -> int:
    if count % tp:
        raise ConfigError(f"{source}: {what}={count} is not divisible by --tp-size {tp}")
    return count // tp


def total_kv_heads(cfg: ModelConfig) -> int:
    """get_total_num_kv_heads (``rules.KV_HEAD_KEYS_SOURCE``): the first KV-head field the text config
    sets, else the attention heads."""
    for key in rules.KV_HEAD_KEYS:
        value = cfg.get(key)
        if value is not None:
            return config_checks.check_count(cfg.source, cfg.where(key), value, config_checks.MAX_HEADS)
    return cfg.positive_int("num_attention_heads")


def kv_heads_per_rank(cfg: ModelConfig, tp: int) -> int:
    """SGLang replicates KV heads when TP exceeds them: max(1, heads // tp)."""
    return max(1, total_kv_heads(cfg) // tp)


def unbuildable(cfg: ModelConfig, key: str) -> ConfigError:
    """The exit-2 error for a config SGLang loads but cannot build pools for, naming the field."""
    rule = rules.UNBUILDABLE[key]
    return ConfigError(
        f"{cfg.source}: field '{cfg.where(rule.field)}' is missing or unusable: SGLang cannot build "
        f"this model's pools ({rule.why}; {rule.source})"
    )


def default_head_dim(cfg: ModelConfig) -> int:
    head_dim = cfg.get("head_dim")
    if head_dim:
        return int(head_dim)
    return cfg.positive_int("hidden_size") // cfg.positive_int("num_attention_heads")


def mha(cfg: ModelConfig, layer_ids: tuple[int, ...], tp: int) -> AttentionGeometry:
    head_dim = default_head_dim(cfg)
    v_head_dim = int(cfg.get("v_head_dim") or head_dim)
    return AttentionGeometry(layer_ids, kv_heads_per_rank(cfg, tp), head_dim, v_head_dim)


def gemma4_shapes(cfg: ModelConfig, tp: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """((full head_dim, full KV heads per rank), (sliding head_dim, sliding KV heads per rank)).

    Gemma 4 states its shapes SWA-first (``rules.GEMMA4_SHAPES_SOURCE``): full-attention layers take
    ``global_head_dim`` (512 when unset) and, with ``attention_k_eq_v``, ``num_global_key_value_heads``.
    """
    swa_dim, swa_heads = default_head_dim(cfg), cfg.positive_int("num_key_value_heads")
    full_dim = int(cfg.get("global_head_dim") or rules.GEMMA4_GLOBAL_HEAD_DIM_DEFAULT)
    full_heads = swa_heads
    if cfg.get("attention_k_eq_v") and cfg.get("num_global_key_value_heads") is not None:
        full_heads = cfg.positive_int("num_global_key_value_heads")
    return (full_dim, max(1, full_heads // tp)), (swa_dim, max(1, swa_heads // tp))


def mla(cfg: ModelConfig, layer_ids: tuple[int, ...]) -> AttentionGeometry:
    """The MLA latent row: kv_lora_rank + qk_rope_head_dim, one buffer, not sharded by TP."""
    row = cfg.positive_int("kv_lora_rank") + int(cfg.get("qk_rope_head_dim") or 0)
    return AttentionGeometry(layer_ids, 1, row, 0, mla=True)


def state_dtypes(cfg: ModelConfig, *, from_config: bool) -> tuple[str, str]:
    """(conv, temporal) dtypes: conv bf16; temporal float32 unless the config says otherwise.

    mamba_utils.mamba2_state_dtype: only families that pass their config read ``mamba_ssm_dtype``.
    """
    temporal = "float32"
    if from_config and cfg.get("mamba_ssm_dtype") in ("float32", "bfloat16", "float16"):
        temporal = str(cfg.get("mamba_ssm_dtype"))
    return "bfloat16", temporal


def _all(cfg: ModelConfig) -> tuple[int, ...]:
    return tuple(range(cfg.positive_int("num_hidden_layers")))


def _where(kinds: list[str], wanted: set[str]) -> tuple[int, ...]:
    return tuple(i for i, kind in enumerate(kinds) if kind in wanted)


def _mamba2_shapes(
    inner: int, groups: int, heads: int, head_dim: int, state: int, kernel: int, tp: int, source: str
) -> tuple[tuple[Shape, ...], Shape]:
    """Mamba2StateShape.create: groups padded for the TP shards, conv (conv_dim/tp, K-1) with
    conv_dim = I + 2*G*N, temporal (H/tp, P, N)."""
    if groups % tp:
        groups += tp - groups  # extra_groups_for_head_shards, as SGLang computes it
    conv = (_per_rank(inner + 2 * groups * state, tp, "conv_dim", source), kernel - 1)
    return (conv,), (_per_rank(heads, tp, "num_heads", source), head_dim, state)


def _gdn_layers(cfg: ModelConfig) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(full, linear) layers of a GDN hybrid, by the rule its config class applies."""
    if cfg.model_type == "gigachat3_5":
        kinds = gigachat_layer_types(cfg)
    elif cfg.text_model_type in rules.QWEN4_MODEL_TYPES and cfg.get("layer_types") is not None:
        kinds = qwen4_layer_types(cfg)
    else:  # Qwen3NextConfig.layers_block_type: full iff (l+1) % full_attention_interval == 0
        if cfg.get(rules.GDN_INTERVAL_FIELD) is None:
            raise unbuildable(cfg, "gdn_interval")
        interval = cfg.positive_int(rules.GDN_INTERVAL_FIELD)
        kinds = ["attention" if (i + 1) % interval == 0 else rules.GDN_LINEAR_KIND for i in _all(cfg)]
    return _where(kinds, {"attention"}), _where(kinds, {rules.GDN_LINEAR_KIND})


def _gdn(cfg: ModelConfig, tp: int) -> LayerSplit:
    full, linear = _gdn_layers(cfg)
    hk, dk = cfg.positive_int("linear_num_key_heads"), cfg.positive_int("linear_key_head_dim")
    hv, dv = cfg.positive_int("linear_num_value_heads"), cfg.positive_int("linear_value_head_dim")
    kernel = cfg.positive_int("linear_conv_kernel_dim", 4)
    conv, temporal = _mamba2_shapes(hv * dv, hk, hv, dv, dk, kernel, tp, cfg.source)
    conv_dtype, temporal_dtype = state_dtypes(cfg, from_config=True)
    return LayerSplit(full, (), RecurrentGeometry(linear, conv, temporal, conv_dtype, temporal_dtype))


def _jet_gdn(cfg: ModelConfig, tp: int) -> LayerSplit:
    kinds = jet_layer_types(cfg)
    jet = (cfg.get("efficient_attention_config") or {}).get("jet") or {}
    heads, dk = int(jet.get("num_heads", 0)), int(jet.get("head_dim", 0))
    if heads <= 0 or dk <= 0:
        raise ConfigError(f"{cfg.source}: efficient_attention_config.jet needs num_heads and head_dim")
    dv = int(dk * float(jet.get("expand_v", 1.0)))
    kernel = int(jet.get("conv_size", 4))
    conv, temporal = _mamba2_shapes(heads * dv, heads, heads, dv, dk, kernel, tp, cfg.source)
    recurrent = RecurrentGeometry(_where(kinds, {"jet"}), conv, temporal, *state_dtypes(cfg, from_config=True))
    return LayerSplit(_where(kinds, {"attn", "swa"}), (), recurrent)


def _nemotron_h(cfg: ModelConfig, tp: int) -> LayerSplit:
    pattern = nemotron_h_layer_types(cfg)
    heads, head_dim = cfg.positive_int("mamba_num_heads"), cfg.positive_int("mamba_head_dim")
    state = cfg.positive_int("ssm_state_size")
    groups = cfg.positive_int("n_groups")
    kernel = int(cfg.get("conv_kernel") or cfg.positive_int("mamba_d_conv", 4))
    conv, temporal = _mamba2_shapes(heads * head_dim, groups, heads, head_dim, state, kernel, tp, cfg.source)
    mamba = tuple(i for i, c in enumerate(pattern) if c == "M")
    full = tuple(i for i, c in enumerate(pattern) if c == "*")
    return LayerSplit(full, (), RecurrentGeometry(mamba, conv, temporal, *state_dtypes(cfg, from_config=True)))


def _falcon_h1(cfg: ModelConfig, tp: int) -> LayerSplit:
    # falcon_h1.py:287-315: every layer has attention and a mamba mixer side by side.
    inner = int(cfg.get("mamba_d_ssm") or cfg.positive_int("mamba_expand") * cfg.positive_int("hidden_size"))
    heads = cfg.positive_int("mamba_n_heads")
    head_dim = cfg.get("mamba_d_head")
    head_dim = inner // heads if head_dim in (None, "auto") else int(head_dim)
    state, groups = cfg.positive_int("mamba_d_state"), cfg.positive_int("mamba_n_groups")
    conv, temporal = _mamba2_shapes(
        inner, groups, heads, head_dim, state, cfg.positive_int("mamba_d_conv", 4), tp, cfg.source
    )
    layers = _all(cfg)
    return LayerSplit(layers, (), RecurrentGeometry(layers, conv, temporal, *state_dtypes(cfg, from_config=True)))


def _granite_hybrid(cfg: ModelConfig, tp: int) -> LayerSplit:
    kinds = granite_layer_types(cfg)
    inner = cfg.positive_int("mamba_expand", 2) * cfg.positive_int("hidden_size")
    state, groups = cfg.positive_int("mamba_d_state"), cfg.positive_int("mamba_n_groups", 1)
    conv, temporal = _mamba2_shapes(
        inner,
        groups,
        cfg.positive_int("mamba_n_heads"),
        cfg.positive_int("mamba_d_head"),
        state,
        cfg.positive_int("mamba_d_conv", 4),
        tp,
        cfg.source,
    )
    recurrent = RecurrentGeometry(_where(kinds, {"mamba"}), conv, temporal, *state_dtypes(cfg, from_config=False))
    return LayerSplit(_where(kinds, {"attention"}), (), recurrent)


def _inner_size(cfg: ModelConfig) -> int:
    return int(cfg.get("intermediate_size") or cfg.positive_int("expand", 2) * cfg.positive_int("hidden_size"))


def _mamba2(cfg: ModelConfig, tp: int) -> LayerSplit:
    state, groups = cfg.positive_int("state_size"), cfg.positive_int("n_groups", 1)
    if cfg.get("intermediate_size") is None:  # SGLang's Mamba2Config no longer derives it from expand
        raise unbuildable(cfg, "mamba2_intermediate")
    conv, temporal = _mamba2_shapes(
        cfg.positive_int("intermediate_size"),
        groups,
        cfg.positive_int("num_heads"),
        cfg.positive_int("head_dim"),
        state,
        cfg.positive_int("conv_kernel", 4),
        tp,
        cfg.source,
    )
    return LayerSplit((), (), RecurrentGeometry(_all(cfg), conv, temporal, *state_dtypes(cfg, from_config=False)))


def _mamba1(cfg: ModelConfig, tp: int) -> LayerSplit:
    # mamba.py:11-80 (create_full_rank): conv (I/tp, K-1), temporal (I/tp, 1, N).
    inner = _per_rank(_inner_size(cfg), tp, "intermediate_size", cfg.source)
    conv = ((inner, cfg.positive_int("conv_kernel", 4) - 1),)
    temporal = (inner, 1, cfg.positive_int("state_size"))
    return LayerSplit((), (), RecurrentGeometry(_all(cfg), conv, temporal, *state_dtypes(cfg, from_config=False)))


def _lfm2(cfg: ModelConfig, tp: int) -> LayerSplit:
    kinds = lfm2_layer_types(cfg)
    if not _where(kinds, {"conv", "short_conv"}):
        raise unbuildable(cfg, "lfm2_no_conv")
    hidden = _per_rank(cfg.positive_int("hidden_size"), tp, "hidden_size", cfg.source)
    conv = ((hidden, cfg.positive_int("conv_L_cache", 3) - 1),)
    recurrent = RecurrentGeometry(
        _where(kinds, {"conv", "short_conv"}),
        conv,
        (1, hidden, 0),
        *state_dtypes(cfg, from_config=cfg.model_type == "lfm2"),
    )
    return LayerSplit(_where(kinds, {"full_attention"}), (), recurrent)


def _zaya(cfg: ModelConfig, tp: int) -> LayerSplit:
    # zaya.py:231-303: the CCA attention layers also keep two conv states.
    layers = _all(cfg)
    marks = cfg.get("zaya_layers")
    full = tuple(i for i in layers if (marks[i] == "a" if marks else i % 2 == 0))
    heads = cfg.positive_int("num_attention_heads") + int(cfg.get("num_key_value_heads") or 0)
    width = _per_rank(heads * default_head_dim(cfg), tp, "cca conv width", cfg.source)
    window = (cfg.positive_int("cca_time0", 2) - 1) + (cfg.positive_int("cca_time1", 2) - 1)
    conv = ((width, window), (cfg.positive_int("hidden_size"), 1))
    return LayerSplit(full, (), RecurrentGeometry(full, conv, (1, 1, 0), *state_dtypes(cfg, from_config=True)))


def _kda_shapes(heads: int, head_dim: int, kernel: int, tp: int, source: str) -> tuple[tuple[Shape, ...], Shape]:
    """KimiLinearStateShape.create: conv (K-1, 3·H·D/tp), temporal (H/tp, D, D)."""
    width = _per_rank(3 * heads * head_dim, tp, "3*num_heads*head_dim", source)
    return ((kernel - 1, width),), (_per_rank(heads, tp, "num_heads", source), head_dim, head_dim)


def _bailing_linear_layers(cfg: ModelConfig) -> tuple[int, ...]:
    """BailingHybridConfig.layers_block_type (bailing_hybrid.py:172-195): an int group size makes
    every group's last layer full attention; a list marks linear layers with 1."""
    layers = _all(cfg)
    group = cfg.get("layer_group_size", 1)
    if isinstance(group, list):
        if len(group) != len(layers):
            raise ConfigError(f"{cfg.source}: layer_group_size list must have num_hidden_layers entries")
        return tuple(i for i in layers if group[i] == 1)
    return tuple(i for i in layers if (i + 1) % int(group) != 0)


def _kda(cfg: ModelConfig, tp: int) -> LayerSplit:
    layers = _all(cfg)
    if "bailing_hybrid" in (cfg.model_type, cfg.text_model_type):  # BailingHybridConfig, top or text config
        linear = _bailing_linear_layers(cfg)
        conv, temporal = _kda_shapes(
            cfg.positive_int("num_attention_heads"),
            default_head_dim(cfg),
            cfg.positive_int("short_conv_kernel_size"),
            tp,
            cfg.source,
        )
    else:
        linear_cfg = cfg.require("linear_attn_config")
        one_based = cfg.model_type in rules.KDA_ONE_BASED_MODEL_TYPES
        if not isinstance(linear_cfg, dict):
            raise ConfigError(f"{cfg.source}: field 'linear_attn_config' must be an object")
        kda = {int(i) - (1 if one_based else 0) for i in linear_cfg.get("kda_layers", [])}
        linear = tuple(i for i in layers if i in kda)
        heads, head_dim = linear_cfg.get("num_heads"), linear_cfg.get("head_dim")
        if not (isinstance(heads, int) and isinstance(head_dim, int) and heads > 0 and head_dim > 0):
            raise ConfigError(f"{cfg.source}: linear_attn_config needs positive integer num_heads and head_dim")
        conv, temporal = _kda_shapes(heads, head_dim, int(linear_cfg.get("short_conv_kernel_size", 4)), tp, cfg.source)
    full = tuple(i for i in layers if i not in linear)
    return LayerSplit(full, (), RecurrentGeometry(linear, conv, temporal, *state_dtypes(cfg, from_config=False)))


def _lightning(cfg: ModelConfig, tp: int) -> LayerSplit:
    layers = _all(cfg)
    if cfg.model_type == "minicpm_sala":
        linear = _where(minicpm_mixer_types(cfg), {rules.LIGHTNING_MIXER})
        heads = int(cfg.get("lightning_nkv") or cfg.positive_int("num_key_value_heads"))
        head_dim = int(cfg.get("lightning_head_dim") or default_head_dim(cfg))
    else:
        linear = _bailing_linear_layers(cfg)
        heads, head_dim = cfg.positive_int("num_attention_heads"), default_head_dim(cfg)
    temporal = (_per_rank(heads, tp, "lightning heads", cfg.source), head_dim, head_dim)
    full = tuple(i for i in layers if i not in linear)
    return LayerSplit(full, (), RecurrentGeometry(linear, ((0, 0),), temporal, *state_dtypes(cfg, from_config=False)))


def _inkling(cfg: ModelConfig, tp: int, *, scattered_sconv: bool = False) -> LayerSplit:
    # inkling.py:77-88 defaults, 218-256 conv shapes; every layer carries six (K-1, dim) convs.
    layers = _all(cfg)
    local = tuple(int(i) for i in cfg.get("local_layer_ids") or [])
    if len(set(local)) != len(local) or any(not 0 <= i < len(layers) for i in local):
        raise ConfigError(f"{cfg.source}: local_layer_ids must be unique ids in [0, {len(layers)})")
    head_dim = default_head_dim(cfg)
    swa_head_dim = int(cfg.get("swa_head_dim") or head_dim)
    full_dim = kv_heads_per_rank(cfg, tp) * head_dim
    swa_heads = cfg.get("swa_num_key_value_heads") or cfg.positive_int("num_key_value_heads")
    local_dim = max(1, int(swa_heads) // tp) * swa_head_dim
    stream = cfg.positive_int("hidden_size")
    if scattered_sconv:
        stream = _per_rank(stream, tp, "hidden_size", cfg.source)
    k = cfg.positive_int("sconv_kernel_size", 4) - 1
    conv = ((k, full_dim), (k, full_dim), (k, local_dim), (k, local_dim), (k, stream), (k, stream))
    full = tuple(i for i in layers if i not in local)
    dtype = rules.INKLING_STATE_DTYPE
    return LayerSplit(full, local, RecurrentGeometry(layers, conv, (0, 0, 0), dtype, dtype))


RECURRENT_SPLITS: dict[str, Callable[[ModelConfig, int], LayerSplit]] = {
    "gdn": _gdn,
    "jet_gdn": _jet_gdn,
    "nemotron_h": _nemotron_h,
    "falcon_h1": _falcon_h1,
    "granite_hybrid": _granite_hybrid,
    "mamba2": _mamba2,
    "mamba1": _mamba1,
    "lfm2": _lfm2,
    "zaya": _zaya,
    "kda": _kda,
    "glm5_next": _kda,
    "lightning": _lightning,
}


def recurrent_split(family: str, cfg: ModelConfig, tp: int, *, scattered_sconv: bool) -> LayerSplit:
    if family == "inkling":
        return _inkling(cfg, tp, scattered_sconv=scattered_sconv)
    return RECURRENT_SPLITS[family](cfg, tp)


def swa_split(cfg: ModelConfig, rule: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(full, swa) layer ids of a hybrid-SWA model, by its architecture's rule (get_hybrid_layer_ids)."""
    layers = _all(cfg)
    if rule == SWA_LAYER_DEFAULT_RULE and cfg.get("hybrid_layer_pattern") is not None:
        rule = "hybrid_layer_pattern"
    if rule == "every_fourth_full":
        swa = tuple(i for i in layers if (i + 1) % 4 != 0)
    elif rule == "local_layer_ids":
        swa = tuple(i for i in layers if i in set(cfg.get("local_layer_ids") or []))
    elif rule == "hybrid_layer_pattern":
        pattern = cfg.require("hybrid_layer_pattern")
        if not isinstance(pattern, list) or len(pattern) < len(layers):
            raise ConfigError(f"{cfg.source}: hybrid_layer_pattern needs one entry per layer")
        swa = tuple(i for i in layers if pattern[i] == 1)
    elif rule == "first_layer_swa":
        return (), (0,)
    elif rule == "all_swa":
        return (), layers
    else:
        kinds = swa_layer_types(cfg)  # one known kind per layer (Step 3.5's MTP entries dropped)
        return _where(kinds, {"full_attention"}), _where(kinds, {"sliding_attention"})
    return tuple(i for i in layers if i not in swa), swa


def dsa_index_row(cfg: ModelConfig) -> int:
    """Bytes per token per layer of a DSA indexer's key cache: the fp8 key plus its float32 scales,
    shared by ``index_kpool`` tokens (``rules.DSA_INDEX_K_SOURCE``)."""
    head = cfg.positive_int("index_head_dim", 128)
    kpool = cfg.positive_int("index_kpool", 1)
    return (head + head // rules.DSA_INDEX_SCALE_BLOCK * rules.DSA_INDEX_SCALE_BYTES) // kpool


def dsv4_compression(cfg: ModelConfig) -> tuple[int, ...]:
    """DeepSeek-V4's compression ratio per layer (0: sliding window only; 4 / 128: a compressed cache too)."""
    layers = cfg.positive_int("num_hidden_layers")
    ratios = cfg.require("compress_ratios")
    if (
        not isinstance(ratios, list)
        or len(ratios) < layers
        or any(isinstance(r, bool) or not isinstance(r, int) or r < 0 for r in ratios)
    ):
        raise ConfigError(
            f"{cfg.source}: field '{cfg.where('compress_ratios')}' must list a compression ratio "
            f"(0, 4, 128, …) for each of the {layers} layers"
        )
    return tuple(ratios[:layers])
