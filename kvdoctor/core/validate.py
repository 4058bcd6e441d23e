"""What a ``config.json`` must hold before any rule reads it, and the launches SGLang itself refuses.

The first is input validation (exit 2); the second, ``launch_refusals``, is a finding about a
well-formed launch (hazard KVD014).

A config is the user's input. Read leniently, a malformed one gives a silent wrong answer (KV heads
``4.5`` read as 4, ``true`` as 1; ``head_dim: -4`` reported as -4.0 KiB/token), or a crash that looks
like a kvdoctor bug. So every field a rule reads is checked here, up front, and each refusal names
the file and the field (exit 2):

- counts are whole numbers (``bool`` is not one), positive, and no larger than any real model has;
  the bounds below are deliberately generous (a few times the largest released model) and exist so
  that an absurd value is refused instead of sizing a terabyte of pools or a 10^7-entry layer list;
- per-layer lists and patterns are lists (a plain string is not a list of layers) of the right
  element type; their length against ``num_hidden_layers`` and the kinds they may name are checked
  where a family reads them (``layer_types.py``), because only the family knows its kinds;
- nested objects are objects.

The reading bounds (file size, JSON nesting) apply before a config is parsed (``config.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvdoctor._exceptions import ConfigError
from kvdoctor.core.sglang import rules
from kvdoctor.text import shown

if TYPE_CHECKING:
    from kvdoctor.core.config import ModelConfig
    from kvdoctor.core.sglang.families import Classification
    from kvdoctor.core.sglang.flags import ServerFlags
    from kvdoctor.core.sglang.policy import Platform, PoolLayout
    from kvdoctor.core.sglang.spec import StateSpec

# Reading bounds: a real config.json is a few KiB and nests 3-4 levels deep.
MAX_CONFIG_BYTES = 16 * 2**20
MAX_JSON_DEPTH = 64

# Size bounds, each well above the largest released model (126 layers, 128 heads, head_dim 576 for an
# MLA latent row, hidden 25,600, a 10M-token context); what exceeds them is a typo or an attack.
MAX_LAYERS = 10_000
MAX_HEADS = 16_384
MAX_HEAD_DIM = 8_192
MAX_WIDTH = 1_000_000  # hidden_size, intermediate_size, an inner mamba width
MAX_KERNEL = 1_024  # convolution kernels and window lengths of recurrent state
MAX_EXPAND = 1_024  # mamba expansion factors
MAX_TOKENS = 2**34  # context lengths and sliding windows

COUNTS: dict[str, int] = {
    "num_hidden_layers": MAX_LAYERS,
    "num_layers": MAX_LAYERS,
    "full_attention_interval": MAX_LAYERS,
    "index_kpool": MAX_KERNEL,
    **dict.fromkeys(
        (
            "num_attention_heads",
            "num_key_value_heads",
            "swa_num_key_value_heads",
            "num_heads",
            "mamba_n_heads",
            "mamba_num_heads",
            "linear_num_key_heads",
            "linear_num_value_heads",
            "lightning_nkv",
            "n_groups",
            "mamba_n_groups",
            "num_global_key_value_heads",
            "num_attention_groups",
            "n_head_kv",
            "num_kv_heads",
            "multi_query_group_num",
        ),
        MAX_HEADS,
    ),
    **dict.fromkeys(
        (
            "head_dim",
            "v_head_dim",
            "swa_head_dim",
            "swa_v_head_dim",
            "kv_lora_rank",
            "mamba_d_head",
            "mamba_head_dim",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "lightning_head_dim",
            "state_size",
            "ssm_state_size",
            "mamba_d_state",
            "global_head_dim",
            "index_head_dim",
        ),
        MAX_HEAD_DIM,
    ),
    **dict.fromkeys(("hidden_size", "intermediate_size", "mamba_d_ssm"), MAX_WIDTH),
    **dict.fromkeys(
        (
            "conv_kernel",
            "mamba_d_conv",
            "linear_conv_kernel_dim",
            "conv_L_cache",
            "sconv_kernel_size",
            "short_conv_kernel_size",
            "cca_time0",
            "cca_time1",
        ),
        MAX_KERNEL,
    ),
    **dict.fromkeys(("expand", "mamba_expand"), MAX_EXPAND),
    "max_position_embeddings": MAX_TOKENS,
}
ZERO_ALLOWED: dict[str, int] = {
    "qk_rope_head_dim": MAX_HEAD_DIM,  # an MLA row without a rope part
    "sliding_window": MAX_TOKENS,  # 0 (like null) means no window
    "sliding_window_size": MAX_TOKENS,
}
NAMED_VALUES: dict[str, tuple[str, ...]] = {"mamba_d_head": ("auto",)}  # falcon_h1.py: "auto" = inner / heads
NESTED_COUNTS: dict[tuple[str, ...], int] = {
    ("linear_attn_config", "num_heads"): MAX_HEADS,
    ("linear_attn_config", "head_dim"): MAX_HEAD_DIM,
    ("linear_attn_config", "short_conv_kernel_size"): MAX_KERNEL,
    ("efficient_attention_config", "jet", "num_heads"): MAX_HEADS,
    ("efficient_attention_config", "jet", "head_dim"): MAX_HEAD_DIM,
    ("efficient_attention_config", "jet", "conv_size"): MAX_KERNEL,
}
OBJECTS = (("linear_attn_config",), ("efficient_attention_config",), ("efficient_attention_config", "jet"))
STRING_LISTS = ("layer_types", "mixer_types", "layers_block_type")
STRINGS = ("dtype", "torch_dtype", "mamba_ssm_dtype", "hybrid_override_pattern", "mtp_hybrid_override_pattern")
BOOLEANS = ("is_hybrid_swa", "attention_k_eq_v", "index_kpool_compress")
NEMOTRON_H_CODES = frozenset("M*-E")  # nemotron_h.py:35-38: mamba, attention, mlp, moe


def _show(value: object) -> str:
    return shown(repr(value), 60)


def check_count(source: str, where: str, value: object, high: int, *, low: int = 1) -> int:
    """VALUE as a whole number in [LOW, HIGH]; a ``ConfigError`` naming SOURCE and the field WHERE."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{source}: field '{where}' must be a whole number, got {_show(value)}")
    if value < low:
        kind = "a positive integer" if low == 1 else f"at least {low}"
        raise ConfigError(f"{source}: field '{where}' must be {kind}, got {value}")
    if value > high:
        raise ConfigError(
            f"{source}: field '{where}' = {value:,} exceeds {high:,}, more than any real model has "
            "(kvdoctor's sanity bound)"
        )
    return value


def bound_for(key: str) -> int:
    """The upper bound of a count field (the widest one for a field this table does not name)."""
    return COUNTS.get(key, ZERO_ALLOWED.get(key, MAX_WIDTH))


def _nested(cfg: ModelConfig, path: tuple[str, ...]) -> Any:
    value: Any = cfg.get(path[0])
    for key in path[1:]:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _explicit_null(cfg: ModelConfig, path: tuple[str, ...]) -> bool:
    """PATH is written as null inside its object: readers' ``.get(key, default)`` would not default."""
    parent = _nested(cfg, path[:-1])
    return isinstance(parent, Mapping) and path[-1] in parent and parent[path[-1]] is None


def _check_names(cfg: ModelConfig) -> None:
    for where, value in (("model_type", cfg.top.get("model_type")), (cfg.where("model_type"), cfg.get("model_type"))):
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{cfg.source}: field '{where}' must be a non-empty string, got {_show(value)}")
    for key in ("architectures",):
        value = cfg.top.get(key) or cfg.text.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(a, str) for a in value)):
            raise ConfigError(f"{cfg.source}: field 'architectures' must be a list of class names")
    for key in STRINGS:
        value = cfg.get(key)
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{cfg.source}: field '{cfg.where(key)}' must be a string, got {_show(value)}")
    for key in BOOLEANS:
        value = cfg.get(key)
        if value is not None and not isinstance(value, bool):
            raise ConfigError(f"{cfg.source}: field '{cfg.where(key)}' must be true or false, got {_show(value)}")


def _check_counts(cfg: ModelConfig) -> None:
    for table, low in ((COUNTS, 1), (ZERO_ALLOWED, 0)):
        for key, high in table.items():
            value = cfg.get(key)
            if value is not None and not (isinstance(value, str) and value in NAMED_VALUES.get(key, ())):
                check_count(cfg.source, cfg.where(key), value, high, low=low)
    for path in OBJECTS:
        value = _nested(cfg, path)
        if value is not None and not isinstance(value, Mapping):
            raise ConfigError(f"{cfg.source}: field '{'.'.join(path)}' must be an object, got {_show(value)}")
    for path, high in NESTED_COUNTS.items():
        value = _nested(cfg, path)
        if value is not None or _explicit_null(cfg, path):
            check_count(cfg.source, ".".join(path), value, high)
    hidden, heads = cfg.get("hidden_size"), cfg.get("num_attention_heads")
    if cfg.get("head_dim") is None and isinstance(hidden, int) and isinstance(heads, int) and hidden < heads:
        raise ConfigError(
            f"{cfg.source}: field '{cfg.where('hidden_size')}' ({hidden}) over 'num_attention_heads' "
            f"({heads}) leaves a head_dim of 0 (set head_dim)"
        )
    expand_v = _nested(cfg, ("efficient_attention_config", "jet", "expand_v"))
    if expand_v is not None and (
        isinstance(expand_v, bool)
        or not isinstance(expand_v, (int, float))
        or not (0 < expand_v <= MAX_EXPAND and math.isfinite(expand_v))
    ):
        raise ConfigError(
            f"{cfg.source}: field 'efficient_attention_config.jet.expand_v' must be a number in "
            f"(0, {MAX_EXPAND}], got {_show(expand_v)}"
        )


def _index_list(cfg: ModelConfig, where: str, value: object, *, low: int, high: int, unique: bool = False) -> None:
    if not isinstance(value, list):
        raise ConfigError(f"{cfg.source}: field '{where}' must be a list of layer ids, got {_show(value)}")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or not low <= item <= high:
            raise ConfigError(
                f"{cfg.source}: field '{where}' must list layer ids in [{low}, {high}], got {_show(item)}"
            )
    if unique and len(set(value)) != len(value):
        raise ConfigError(f"{cfg.source}: field '{where}' lists a layer twice")


def _layers(cfg: ModelConfig) -> int | None:
    value = cfg.get("num_hidden_layers")
    return value if isinstance(value, int) else None


def _check_layer_lists(cfg: ModelConfig) -> None:
    source, layers = cfg.source, _layers(cfg)
    for key in STRING_LISTS:
        value = cfg.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise ConfigError(
                f"{source}: field '{cfg.where(key)}' must be a list of strings (one per layer), got {_show(value)}"
            )
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and layers is not None and (len(pattern) != layers or set(pattern) - NEMOTRON_H_CODES):
        raise ConfigError(
            f"{source}: field '{cfg.where('hybrid_override_pattern')}' must have one of "
            f"M * - E per layer ({layers}), got {_show(pattern)}"
        )
    high = (layers or MAX_LAYERS) - 1
    local = cfg.get("local_layer_ids")
    if local is not None:
        _index_list(cfg, cfg.where("local_layer_ids"), local, low=0, high=high, unique=True)
    kda = _nested(cfg, ("linear_attn_config", "kda_layers"))
    if kda is not None or _explicit_null(cfg, ("linear_attn_config", "kda_layers")):
        _index_list(cfg, "linear_attn_config.kda_layers", kda, low=0, high=MAX_LAYERS, unique=True)
    for key, exact in (("hybrid_layer_pattern", False), ("layer_group_size", True)):
        value = cfg.get(key)
        if key == "layer_group_size" and not isinstance(value, list):
            if value is not None or key in cfg.text or key in cfg.top:  # null is neither a size nor a list
                check_count(source, cfg.where(key), value, MAX_LAYERS)
            continue
        if value is None:
            continue
        if not isinstance(value, list) or any(isinstance(v, bool) or v not in (0, 1) for v in value):
            raise ConfigError(f"{source}: field '{cfg.where(key)}' must be a list of 0/1 per layer")
        if layers is not None and (len(value) != layers if exact else len(value) < layers):
            raise ConfigError(f"{source}: field '{cfg.where(key)}' has {len(value)} entries for {layers} layers")
    marks = cfg.get("zaya_layers")
    if marks:  # zaya.py:104-115: "a" marks attention, an int a MoE layer; its length is the layer count
        if not isinstance(marks, list) or any(
            m != "a" and (isinstance(m, bool) or not isinstance(m, int)) for m in marks
        ):
            raise ConfigError(f"{source}: field 'zaya_layers' must list \"a\" or an expert count per layer")
        if layers is not None and len(marks) != layers:
            raise ConfigError(
                f"{source}: field 'zaya_layers' has {len(marks)} entries but num_hidden_layers is "
                f"{layers} (SGLang takes the list's length as the layer count)"
            )


def validate_config(cfg: ModelConfig) -> None:
    """Refuse (``ConfigError``, exit 2) a config whose fields no real model could have."""
    _check_names(cfg)
    _check_counts(cfg)
    _check_layer_lists(cfg)


def json_depth(value: object) -> int:
    """How deeply VALUE nests lists and objects (iteratively: a deep value must not recurse)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        if depth > MAX_JSON_DEPTH:
            break
        stack.extend((child, depth + 1) for child in children)
    return deepest


# --- Launches SGLang refuses at start-up (hazard KVD014; the rest of the analysis is still shown) ---


@dataclass(frozen=True)
class Refusal:
    """One start-up refusal SGLang 0.5.23 would raise for this launch: its message and where it raises."""

    key: str  # the row of rules.REFUSALS
    message: str
    source: rules.Cite

    @property
    def where(self) -> str:
        return self.source.where


def _refusal(key: str, **fields: object) -> Refusal:
    rule = rules.REFUSALS[key]
    return Refusal(key, rule.message.format(**fields), rule.source)


def _decode_radix_off(cfg: ModelConfig, flags: ServerFlags) -> bool:
    """SGLang runs this server with the radix cache off: asked to, a decode server without its radix
    opt-in (``rules.DECODE_RADIX_SOURCE``), or a model that forces it off (``RADIX_OFF_FAMILIES_SOURCE``)."""
    return (
        flags.disable_radix_cache
        or (flags.is_decode and not flags.disaggregation_decode_enable_radix_cache)
        or cfg.model_type in rules.RADIX_OFF_MODEL_TYPES
    )


def _flag_refusals(cfg: ModelConfig, flags: ServerFlags, cls: Classification) -> list[Refusal]:
    """Refusals of the argument stage: model overrides, handle_pd_disaggregation, handle_cache_compatibility."""
    found: list[Refusal] = []
    kv_dtype = flags.kv_cache_dtype
    hybrid_minicpm = cfg.model_type in rules.RADIX_OFF_MODEL_TYPES and cls.uses_ssm_state
    if hybrid_minicpm and flags.enable_hierarchical_cache:
        found.append(_refusal("minicpm_hicache"))
    if cls.is_dsa and kv_dtype not in rules.DSA_KV_DTYPES:
        found.append(_refusal("dsa_kv_dtype"))
    if cls.is_dsv4 and kv_dtype not in rules.DSV4_KV_DTYPES:
        found.append(_refusal("dsv4_kv_dtype", dtype=kv_dtype))
    explicit = flags.disaggregation_decode_retraction_backup
    if flags.disaggregation_decode_host_receive_threshold < 1 and explicit == "cpu_tensor":
        found.append(_refusal("receive_cpu_tensor"))
    host_pool = flags.retraction_backup_declared == "host_pool"
    preemption = flags.enable_priority_scheduling and not flags.disable_priority_preemption
    refused = [
        ("host_pool_not_decode", host_pool and not flags.is_decode),
        ("host_pool_dcp", host_pool and flags.dcp_enabled),
        ("host_pool_priority", host_pool and preemption),
        (
            "hicache_without_radix",
            flags.enable_hierarchical_cache and _decode_radix_off(cfg, flags) and not hybrid_minicpm,
        ),
        ("offload_not_decode", flags.disaggregation_decode_enable_offload_kvcache and not flags.is_decode),
        (
            "offload_no_storage",
            flags.disaggregation_decode_enable_offload_kvcache
            and flags.is_decode
            and flags.hicache_storage_backend is None,
        ),
        (
            "offload_host_pool",
            flags.disaggregation_decode_enable_offload_kvcache
            and flags.is_decode
            and flags.hicache_storage_backend is not None
            and host_pool,
        ),
    ]
    found += [_refusal(key) for key, hit in refused if hit]
    return found


def _model_refusals(cfg: ModelConfig, flags: ServerFlags, spec: StateSpec, derived_context: int) -> list[Refusal]:
    """Refusals of the model stage: the context length, and TP against the attention heads."""
    from kvdoctor.core.sglang import geometry  # geometry reads configs, which this module validates first

    found: list[Refusal] = []
    if spec.classification.is_dsv4 and flags.disable_hybrid_swa_memory:
        found.append(_refusal("dsv4_no_hybrid_swa"))
    if flags.context_length is not None and flags.context_length > derived_context:
        found.append(_refusal("context_length", requested=flags.context_length, derived=derived_context))
    tp, heads = flags.attention_tp_size, cfg.get("num_attention_heads")
    attention = spec.full if spec.full is not None else spec.swa
    if tp > 1 and isinstance(heads, int) and attention is not None and not attention.mla:
        kv_heads = geometry.total_kv_heads(cfg)
        if heads % tp:
            found.append(_refusal("tp_heads", tp=tp, heads=heads))
        if (kv_heads >= tp and kv_heads % tp) or (kv_heads < tp and tp % kv_heads):
            found.append(_refusal("tp_kv_heads", tp=tp, heads=kv_heads))
    return found


def _decode_radix_refusals(cfg: ModelConfig, flags: ServerFlags, spec: StateSpec) -> list[Refusal]:
    """validate_decode_radix_cache: a decode server's radix opt-in on a hybrid-SWA model."""
    cls = spec.classification
    if not (flags.is_decode and flags.disaggregation_decode_enable_radix_cache and cls.is_hybrid_swa):
        return []
    if flags.enable_hierarchical_cache:
        return [_refusal("decode_radix_swa_hicache")]
    if cls.is_dsv4:  # kvdoctor models the default (non-unified) DeepSeek-V4 KV layout
        return [_refusal("decode_radix_dsv4")]
    if cfg.architecture in rules.SWA_COMPRESS_ARCHS:
        return [_refusal("decode_radix_swa_compress")]
    return []


def _tree_cache_refusals(flags: ServerFlags, spec: StateSpec, layout: PoolLayout, backend: str) -> list[Refusal]:
    """What create_unified_radix_cache and validate_retraction_host_capacity refuse for a host_pool
    retraction backup on a decode server (``rules.REFUSALS`` host_pool_*)."""
    if not (flags.is_decode and backend == "host_pool"):
        return []
    cls = spec.classification
    if cls.uses_ssm_state:
        return [_refusal("host_pool_mamba")]
    if cls.is_hybrid_swa and layout.kv_pool == "SWAKVPool" and spec.full is None:
        return [_refusal("host_pool_pure_swa")]
    if layout.kv_pool not in rules.HOST_POOL_LAYOUTS and layout.kv_pool != "SWAKVPool":
        return [_refusal("host_pool_layout")]
    return []


def launch_refusals(
    cfg: ModelConfig,
    flags: ServerFlags,
    spec: StateSpec,
    layout: PoolLayout,
    backend: str,
    derived_context: int,
    platform: Platform | None = None,
) -> tuple[Refusal, ...]:
    """Every start-up refusal SGLang 0.5.23 would raise for CFG under FLAGS, in the order it meets them.

    The one home for launch refusals: each becomes hazard KVD014 carrying SGLang's message and place,
    while the rest of the analysis is still shown (malformed input, by contrast, is exit 2 where it
    enters). SGLang stops at the first; kvdoctor lists each one that applies.
    """
    hopper = platform is not None and not platform.is_sm100
    platform_refusals = [_refusal("mxfp8_needs_blackwell")] if hopper and flags.kv_cache_dtype == "mxfp8" else []
    return (
        *platform_refusals,
        *_flag_refusals(cfg, flags, spec.classification),
        *_model_refusals(cfg, flags, spec, derived_context),
        *_decode_radix_refusals(cfg, flags, spec),
        *_tree_cache_refusals(flags, spec, layout, backend),
    )
