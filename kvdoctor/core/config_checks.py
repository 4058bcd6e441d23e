"""What a ``config.json`` must hold before any rule reads it: the input checks (exit 2) both servers share.

A config is the user's input. Read leniently, a malformed one gives a silent wrong answer (KV heads
``4.5`` read as 4, ``true`` as 1; ``head_dim: -4`` reported as -4.0 KiB/token), or a crash that looks
like a kvdoctor bug. So every field a rule reads is checked here, up front, and each refusal names
the file and the field (exit 2):

- counts are whole numbers (``bool`` is not one), positive, and no larger than any real model has;
  the bounds below are deliberately generous (a few times the largest released model) and exist so
  that an absurd value is refused instead of sizing a terabyte of pools or a 10^7-entry layer list;
- per-layer lists and patterns are lists (a plain string is not a list of layers) of the right
  element type; their length against ``num_hidden_layers`` and the kinds they may name are checked
  where a family reads them (``sglang/layer_types.py``), because only the family knows its kinds;
- nested objects are objects.

The reading bounds (file size, JSON nesting) apply before a config is parsed (``config.py``). Launches
a well-formed config and flags still make SGLang refuse are a finding, not bad input: hazard KVD014,
``sglang/refusals.py``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Protocol

from kvdoctor._exceptions import ConfigError
from kvdoctor.core.config_rules import PER_LAYER_INTERMEDIATE_MODEL_TYPES
from kvdoctor.text import shown


class ConfigFields(Protocol):
    """What these checks read of a parsed config (``config.ModelConfig``, which calls them while it is
    being parsed: this module depends on that shape, not on the module that builds it)."""

    @property
    def source(self) -> str: ...
    @property
    def top(self) -> Mapping[str, Any]: ...
    @property
    def text(self) -> Mapping[str, Any]: ...
    def where(self, key: str) -> str: ...
    def get(self, key: str, default: Any = None) -> Any: ...


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
MAX_LOOPS = 64  # how often a loop model runs its layers (Nanbeige, IQuestLoopCoder: 2)

COUNTS: dict[str, int] = {
    "num_hidden_layers": MAX_LAYERS,
    "num_layers": MAX_LAYERS,
    "full_attention_interval": MAX_LAYERS,
    "index_kpool": MAX_KERNEL,
    "loop_num": MAX_LOOPS,
    "num_loops": MAX_LOOPS,
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


def _nested(cfg: ConfigFields, path: tuple[str, ...]) -> Any:
    value: Any = cfg.get(path[0])
    for key in path[1:]:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _explicit_null(cfg: ConfigFields, path: tuple[str, ...]) -> bool:
    """PATH is written as null inside its object: readers' ``.get(key, default)`` would not default."""
    parent = _nested(cfg, path[:-1])
    return isinstance(parent, Mapping) and path[-1] in parent and parent[path[-1]] is None


def _check_names(cfg: ConfigFields) -> None:
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


def _per_layer_counts(cfg: ConfigFields, key: str) -> bool:
    """KEY is a list with one count per layer, as the model type's config class keeps it (Gemma 3n's
    ``intermediate_size``: ``config_rules.PER_LAYER_INTERMEDIATE_MODEL_TYPES``): each entry is checked as the
    count, and the list must name every layer (transformers' Gemma3nTextConfig refuses any other length)."""
    value = cfg.get(key)
    types = {cfg.top.get("model_type"), cfg.get("model_type")}
    if key != "intermediate_size" or not isinstance(value, list) or not types & PER_LAYER_INTERMEDIATE_MODEL_TYPES:
        return False
    where = cfg.where(key)
    for i, item in enumerate(value):
        check_count(cfg.source, f"{where}[{i}]", item, bound_for(key))
    layers = _layers(cfg)
    if layers is not None and len(value) != layers:
        raise ConfigError(
            f"{cfg.source}: field '{where}' has {len(value)} entries for {layers} layers "
            "(one per layer, or one number for all)"
        )
    return True


def _check_counts(cfg: ConfigFields) -> None:
    for table, low in ((COUNTS, 1), (ZERO_ALLOWED, 0)):
        for key, high in table.items():
            value = cfg.get(key)
            if value is None or (isinstance(value, str) and value in NAMED_VALUES.get(key, ())):
                continue
            if not _per_layer_counts(cfg, key):
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


def _index_list(cfg: ConfigFields, where: str, value: object, *, low: int, high: int, unique: bool = False) -> None:
    if not isinstance(value, list):
        raise ConfigError(f"{cfg.source}: field '{where}' must be a list of layer ids, got {_show(value)}")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or not low <= item <= high:
            raise ConfigError(
                f"{cfg.source}: field '{where}' must list layer ids in [{low}, {high}], got {_show(item)}"
            )
    if unique and len(set(value)) != len(value):
        raise ConfigError(f"{cfg.source}: field '{where}' lists a layer twice")


def _layers(cfg: ConfigFields) -> int | None:
    value = cfg.get("num_hidden_layers")
    return value if isinstance(value, int) else None


def _check_layer_lists(cfg: ConfigFields) -> None:
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


def validate_config(cfg: ConfigFields) -> None:
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
