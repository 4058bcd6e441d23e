"""``--shrink``: any config made tiny, keeping every layer kind and the order they come in, or refused up front.

Pure data (a dict in, a dict out), so a test checks every rule without torch. Per-layer fields (a
list or a pattern string as long as the layer count: ``layer_types``, ``hybrid_override_pattern``,
``layers_block_type`` …; a ``per_layer_config`` keyed by layer index; index lists such as Kimi's 1-based
``linear_attn_config.kda_layers``) are cut to the same few layer indices: the shortest prefix of the model that
holds every kind (2 to 4 layers), or, when a kind first appears later, the first layer of each kind in
model order. Widths go to ``hidden_size`` 128 with small heads, every other width, head count, rank and expert
count is capped by its name (:data:`CAP_RULES`), the vocabulary to 1,024 tokens, and the dtype to float32
(random weights give near-flat logits; bf16 rounding flips near-ties), and the output head is untied from the
embeddings. A nested ``text_config`` is shrunk the same way and a vision or audio tower to the same widths (its
output width follows the text model's), so the checkpoint stays a few MB.

A Mamba state is rebuilt consistent with the new width: every Mamba2 config class ties its inner width to the
model's (``mamba_n_heads * mamba_d_head == mamba_expand * hidden_size``, transformers'
``GraniteMoeHybridConfig.validate_architecture``, ``Mamba2Config.validate_architecture``), so keeping the
full-size heads at hidden 128 is a config transformers refuses. The state's size is the server's
(``mamba_state`` of :func:`kvdoctor.core.consistency_facts.consistency_facts`, in the server's room): vLLM raises
its attention block until one attention page holds a whole Mamba state (``Platform._align_hybrid_block_size``),
so the full-size state a shrunk NemotronH kept (128 heads x 64 x 128) padded its attention blocks to 8,448
tokens, and a short request never grew a block: vLLM queued instead of preempting; its state keeps the block at
the CPU's 32. SGLang sizes its Mamba pool apart from its KV pages, so its state keeps a larger head and state
size, and a NemotronH, whose Mamba width is tied to nothing, keeps its full-size state (:data:`UNTIED_MAMBA`,
``shrinks_untied_mamba``).

What cannot become a checkpoint is refused here, before any work (``InputError``, exit 2, one line): a
``model_type`` transformers maps to no causal-LM class (the checkpoint is written by
``AutoModelForCausalLM.from_config``, :mod:`kvdoctor.consistency.checkpoint`), and a shrunk config whose
dimensions still disagree (:func:`inconsistencies`).
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from kvdoctor._exceptions import InputError
from kvdoctor.core.consistency_facts import TABLE as SERVER_FACTS
from kvdoctor.core.consistency_facts import consistency_facts
from kvdoctor.core.sglang._generated.transformers_causal_lm import (
    TRANSFORMERS_CAUSAL_LM_MODEL_TYPES,
    TRANSFORMERS_VERSION,
)

HIDDEN = 128
HEADS = 4
HEAD_DIM = 32
KV_HEADS = 2
INTERMEDIATE = 256
MOE_INTERMEDIATE = 64
VOCAB = 1024
MIN_LAYERS, MAX_LAYERS = 2, 4
MAX_POSITIONS = 4096
SPECIAL_IDS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
# Per-layer fields whose values say the layer's kind, in the order they are looked for.
PATTERN_KEYS = ("layer_types", "hybrid_override_pattern", "layers_block_type", "block_types", "mixer_types")
# The layer count, under the names config classes give it (the first present is the model's).
LAYER_KEYS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers")
# Index lists of layers (LFM2's full_attn_idxs, Kimi's kda_layers): recomputed from the kept layers.
INDEX_KEY = re.compile(r"(_idxs|_indices|_layers|_layer_ids|_layer_idx)$")
# Layer kinds given as "every PERIOD-th layer from OFFSET" (Jamba: attention 4 of 8, experts 1 of 2).
PERIOD_KEYS = (("attn_layer_period", "attn_layer_offset"), ("expert_layer_period", "expert_layer_offset"))
DROP_KEYS = ("quantization_config", "compression_config", "auto_map", "_name_or_path")
# Nested configs of the language model (shrunk like the top) and of the towers beside it (same widths).
TEXT_KEYS = ("text_config", "llm_config", "language_config")
TOWER_KEY = re.compile(r"(vision|audio|speech|visual|image|encoder)[a-z_]*config$")
# Aliases of the width and head count (the class's own name is the one set, so transformers' attribute_map
# never sees both).
HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model", "model_dim", "dim")
HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads", "num_heads")
KV_KEYS = ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "num_query_groups", "num_attention_groups")
# Other fields capped by name: (pattern, cap), the first match wins; only integers, only lowered.
CAP_RULES: tuple[tuple[re.Pattern[str], int], ...] = tuple(
    (re.compile(p), cap)
    for p, cap in (
        (r"experts_per_tok|experts_per_token|^top_k_experts$|^moe_top_?k$|^num_selected_experts$", 2),
        (r"^n_shared_experts$|^num_shared_experts$", 1),
        (r"^(n_group|num_expert_group|topk_group|n_groups_for_topk)$", 1),
        (r"experts?$|^moe_num_experts$|^zero_expert_num$|^num_experts$", 4),
        (r"(moe|expert|shared)\w*(intermediate|ffn|ff)\w*|share_expert_dims?", MOE_INTERMEDIATE),
        (r"intermediate_size|ffn_hidden_size|^ffn_dim$|^ff_dim$|^block_ff_dim$|^mlp_dim$|^d_ff$", INTERMEDIATE),
        (r"lora_rank$", 64),
        (r"rope_head_dim$", 16),
        (r"head_dim$|head_size$|^d_head$|^kv_channels$|headdim$", HEAD_DIM),
        (r"heads$", HEADS),
        (r"index_topk$", 64),
        (r"^vocab_size_per_layer_input$", VOCAB),  # Gemma 3n/4's per-layer embeddings (262,144 x 256 per layer)
        (r"^hidden_size_per_layer_input$", HEAD_DIM),
        (r"^num_nextn_predict_layers$|^num_mtp_layers$|^mtp_num_layers$", 1),
    )
)
# Mamba fields, each under every name a config class gives it.
MAMBA_HEADS = ("mamba_n_heads", "mamba_num_heads", "n_mamba_heads", "mamba_nheads")
MAMBA_HEAD_DIM = ("mamba_d_head", "mamba_head_dim", "mamba_headdim")
MAMBA_GROUPS = ("mamba_n_groups", "n_groups", "mamba_ngroups")
MAMBA_STATE_KEYS = ("mamba_d_state", "ssm_state_size", "state_size")
MAMBA_EXPAND = ("mamba_expand", "expand")
MAMBA_D_SSM = ("mamba_d_ssm",)
PURE_MAMBA2 = ("mamba2",)
# Model types whose Mamba inner width is its own (heads x head dim, nothing tied to hidden_size: transformers'
# NemotronHConfig): a server whose ``shrinks_untied_mamba`` is False keeps their state at full size (SGLang sizes
# its Mamba pool apart from its KV pages, and a real-size state is what its pool then holds).
UNTIED_MAMBA = ("nemotron_h",)  # model types whose num_heads / head_dim are the Mamba heads
SERVERS = tuple(SERVER_FACTS)  # the servers --shrink sizes a Mamba state for (one line each in SERVER_FACTS)


def kept_layers(kinds: Sequence[Any]) -> list[int]:
    """Indices of the layers to keep for a model whose layer I has kind ``kinds[I]``."""
    if not kinds:
        return list(range(MIN_LAYERS))
    wanted = set(kinds)
    seen: set[Any] = set()
    for end, kind in enumerate(kinds, 1):
        seen.add(kind)
        if seen == wanted and end <= MAX_LAYERS:
            # A mixed model keeps MAX_LAYERS (the pattern continues past its first full period).
            size = max(end, MIN_LAYERS) if len(wanted) == 1 else MAX_LAYERS
            return list(range(min(size, len(kinds))))
        if end > MAX_LAYERS:
            break
    first: dict[Any, int] = {}
    for i, kind in enumerate(kinds):
        first.setdefault(kind, i)
    return sorted(first.values())


def _layer_key(config: Mapping[str, Any]) -> str | None:
    return next((k for k in LAYER_KEYS if isinstance(config.get(k), int) and config[k] > 0), None)


def _layer_count(config: Mapping[str, Any]) -> int | None:
    """The layer count: its field, else the length of a per-layer pattern (NemotronH may give only
    ``layers_block_type``, and its config class counts the layers from it)."""
    key = _layer_key(config)
    if key is not None:
        return int(config[key])
    pattern = next((config[k] for k in PATTERN_KEYS if isinstance(config.get(k), (list, str)) and config[k]), None)
    return len(pattern) if pattern is not None else None


def _index_lists(config: Mapping[str, Any], layers: int) -> list[tuple[dict[str, Any] | None, str, int]]:
    """Every (holder, key, base) of an index list of layers: top-level or one dict deep (``linear_attn_config``);
    holder None is the top. BASE is 1 for a 1-based list (no 0 anywhere, and the last layer numbered LAYERS)."""
    found: list[tuple[dict[str, Any] | None, str, list[int]]] = []
    for holder in (None, *[v for v in config.values() if isinstance(v, dict) and "model_type" not in v]):
        items = (config if holder is None else holder).items()
        for key, value in items:
            listed = isinstance(value, list) and bool(value) and all(type(i) is int for i in value)
            listed = listed and all(a < b for a, b in itertools.pairwise(value))  # indices; Llama 4's 0/1 flags are not
            if listed and isinstance(key, str) and INDEX_KEY.search(key):
                found.append((holder, key, value))
    numbers = [i for _, _, v in found for i in v]
    base = 1 if numbers and 0 not in numbers and max(numbers) == layers else 0
    return [(h, k, base) for h, k, v in found if all(base <= i < layers + base for i in v)]


def _kinds(config: Mapping[str, Any], layers: int | None) -> Sequence[Any]:
    for key in PATTERN_KEYS:
        value = config.get(key)
        if isinstance(value, (list, str)) and value and (layers is None or len(value) == layers):
            return value
    if layers is None:
        return []
    lists = _index_lists(config, layers)
    if lists:
        members = [((config if h is None else h)[k], b, k) for h, k, b in lists]
        return [tuple(k for v, b, k in members if i + b in v) for i in range(layers)]
    periods = _periods(config)
    if periods:
        return [tuple(i % p == o for p, o in periods.values()) for i in range(layers)]
    dense = config.get("first_k_dense_replace")
    if isinstance(dense, int) and 0 < dense < layers:
        return ["dense" if i < dense else "moe" for i in range(layers)]
    return []


def _periods(config: Mapping[str, Any]) -> dict[tuple[str, str], tuple[int, int]]:
    pairs = {(p, o): (config.get(p), config.get(o)) for p, o in PERIOD_KEYS}
    return {k: (p, o) for k, (p, o) in pairs.items() if type(p) is int and type(o) is int and p > 0}


def _repeat_periods(out: dict[str, Any], keep: list[int]) -> None:
    """Each period/offset pair set so the kept layers have the kinds they had (a kept prefix needs nothing). One
    kept layer of a kind: period = the new layer count, offset = its new index; none: offset past the layers."""
    if keep == list(range(len(keep))):
        return
    n = len(keep)
    for (pk, ok), (period, offset) in _periods(out).items():
        at = [new for new, old in enumerate(keep) if old % period == offset]
        for p in range(1, n + 2):
            o = at[0] if at else n
            if o < p and [i for i in range(n) if i % p == o] == at:
                out[pk], out[ok] = p, o
                break


def shrink(config: Mapping[str, Any], *, server: str = "sglang", model: str | None = None) -> dict[str, Any]:
    """A tiny copy of CONFIG (a nested ``text_config`` and its towers too), for SERVER's pools; ``InputError``
    (exit 2, naming MODEL) for a config that cannot become a tiny checkpoint."""
    if server not in SERVER_FACTS:
        raise ValueError(f"shrink: server must be one of {', '.join(SERVER_FACTS)}, got {server!r}")
    name = model or str(config.get("model_type", "the config"))
    why = unbuildable(config)
    if why:
        raise InputError(f"{name}: --shrink cannot make a checkpoint of it: {why}")
    out = _shrink_one(config, server)
    for nested in TEXT_KEYS:
        if isinstance(out.get(nested), Mapping):
            out[nested] = _shrink_one(out[nested], server)
            out[nested].pop("torch_dtype", None)  # the top's dtype holds (nested dtypes are not read)
    for key, value in list(out.items()):
        if TOWER_KEY.search(key) and key not in TEXT_KEYS and isinstance(value, Mapping):
            out[key] = _shrink_tower(value)
    problems = inconsistencies(out)
    if problems:
        raise InputError(f"{name}: --shrink leaves its dimensions inconsistent: {'; '.join(problems[:3])}")
    return out


def unbuildable(config: Mapping[str, Any]) -> str | None:
    """Why a random checkpoint of CONFIG cannot be written (None: it can): its ``model_type`` has no causal-LM
    class in transformers (the table generated from the pinned transformers' ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``,
    ``kvdoctor/core/sglang/_generated/transformers_causal_lm.py``)."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type in TRANSFORMERS_CAUSAL_LM_MODEL_TYPES:
        return None
    return (
        f"model_type {model_type!r} has no causal-LM class in transformers {TRANSFORMERS_VERSION} "
        "(AutoModelForCausalLM, which writes the seeded checkpoint, cannot build it); pass a model directory "
        "with its own *.safetensors instead of --shrink"
    )


def small_mamba_state(config: Mapping[str, Any], server: str = "vllm") -> dict[str, int]:
    """The Mamba2 fields SERVER's shrink sets in CONFIG (empty for a model without them); the default is the one
    caller's (``consistency.servers.vllm.plan._small_state``)."""
    state = consistency_facts(server).mamba_state
    if not all(isinstance(config.get(k), int) for k in state):
        return {}
    return dict(state)


def _cut_layers(out: dict[str, Any], layers: int, keep: list[int]) -> None:
    """Every per-layer field of OUT cut to the layers KEEP (renumbered 0..)."""
    lists = _index_lists(out, layers)
    index_fields = {(id(h), k) for h, k, _ in lists}
    for field, value in list(out.items()):
        if (id(None), field) in index_fields:
            continue
        if isinstance(value, list) and len(value) == layers:
            out[field] = [value[i] for i in keep]
        elif isinstance(value, str) and field in PATTERN_KEYS and len(value) == layers:
            out[field] = "".join(value[i] for i in keep)
        elif field == "per_layer_config" and isinstance(value, Mapping):
            out[field] = _cut_per_layer(value, keep)
    for holder, key, base in lists:
        target = out if holder is None else holder
        target[key] = [n + base for n, i in enumerate(keep) if i + base in target[key]]
    key = _layer_key(out)
    if key is not None:
        out[key] = len(keep)


def _cut_per_layer(value: Mapping[Any, Any], keep: list[int]) -> dict[str, Any]:
    """``per_layer_config`` ({layer index: overrides}, keys ints or zero-padded strings) for the kept layers,
    renumbered, each override capped like the top."""
    by_index = {int(k): v for k, v in value.items() if str(k).isdigit()}
    out: dict[str, Any] = {}
    for n, i in enumerate(keep):
        if i in by_index:
            override = dict(by_index[i]) if isinstance(by_index[i], Mapping) else by_index[i]
            out[str(n)] = _capped(override) if isinstance(override, dict) else override
    return out


def _capped(fields: dict[str, Any]) -> dict[str, Any]:
    for field, value in fields.items():
        if type(value) is not int or not isinstance(field, str) or field in MAMBA_HEADS + MAMBA_HEAD_DIM:
            continue  # the Mamba state is set whole (_mamba)
        for pattern, cap in CAP_RULES:
            if pattern.search(field):
                fields[field] = min(value, cap)
                break
    return fields


def _set_alias(out: dict[str, Any], names: Sequence[str], value: int) -> None:
    """VALUE under the first of NAMES that OUT holds (the first name when none)."""
    present = [n for n in names if isinstance(out.get(n), int)]
    out[present[0] if present else names[0]] = value


def _mamba(out: dict[str, Any], server: str) -> None:
    """A Mamba2 state consistent with HIDDEN (heads x head dim = expand x hidden), small for SERVER."""
    pure = out.get("model_type") in PURE_MAMBA2
    heads_keys = (*MAMBA_HEADS, "num_heads") if pure else MAMBA_HEADS
    dim_keys = (*MAMBA_HEAD_DIM, "head_dim") if pure else MAMBA_HEAD_DIM
    heads = [k for k in heads_keys if isinstance(out.get(k), int)]
    dims = [k for k in dim_keys if isinstance(out.get(k), int)]
    facts = consistency_facts(server)
    if not heads or (not facts.shrinks_untied_mamba and out.get("model_type") in UNTIED_MAMBA):
        return
    state = facts.mamba_state
    n_heads, head_dim = state["mamba_num_heads"], state["mamba_head_dim"]
    expand = n_heads * head_dim // HIDDEN
    for k in heads:
        out[k] = n_heads
    for k in dims:
        out[k] = head_dim
    for k in MAMBA_EXPAND:
        if isinstance(out.get(k), (int, float)):
            out[k] = expand
    for k in MAMBA_GROUPS:
        if isinstance(out.get(k), int):
            out[k] = state["n_groups"]
    for k in MAMBA_STATE_KEYS:
        if isinstance(out.get(k), int):
            out[k] = state["ssm_state_size"]
    for k in MAMBA_D_SSM:
        if isinstance(out.get(k), int):
            out[k] = n_heads * head_dim
    if pure and isinstance(out.get("intermediate_size"), int):
        out["intermediate_size"] = n_heads * head_dim


def _shrink_one(config: Mapping[str, Any], server: str = "sglang") -> dict[str, Any]:
    out = copy.deepcopy(dict(config))
    for key in DROP_KEYS:
        out.pop(key, None)
    layers = _layer_count(out)
    kinds = _kinds(out, layers)
    keep = kept_layers(list(kinds))
    if layers is not None:
        keep = [i for i in keep if i < layers] or list(range(min(layers, MIN_LAYERS)))
        _repeat_periods(out, keep)
        _cut_layers(out, layers, keep)
    if kinds and "full_attn_idxs" in out and not _index_lists(config, layers or 0):
        out["full_attn_idxs"] = [n for n, i in enumerate(keep) if kinds[i] in ("full_attention", "attention")]
    heads_key = next((k for k in HEAD_KEYS if isinstance(out.get(k), int)), "num_attention_heads")
    if out.get("model_type") in PURE_MAMBA2:
        heads_key = "num_attention_heads"
    heads = out.get(heads_key)
    kv_key = next((k for k in KV_KEYS if isinstance(out.get(k), int)), "num_key_value_heads")
    kv = out.get(kv_key)
    _capped(out)
    _set_alias(out, HIDDEN_KEYS, HIDDEN)
    out[heads_key] = HEADS
    out[kv_key] = HEADS if kv is None or kv == heads else KV_HEADS
    if "head_dim" in out and out.get("model_type") not in PURE_MAMBA2:
        out["head_dim"] = HEAD_DIM
    if not any(pattern.search(k) for k in out for pattern, cap in CAP_RULES if cap == INTERMEDIATE):
        out["intermediate_size"] = INTERMEDIATE  # absent: the class's default (11,008 for Granite) would hold
    if "block_auto_adjust_ff_dim" in out:
        out["block_auto_adjust_ff_dim"] = False
    _mamba(out, server)
    out["vocab_size"] = VOCAB
    for field in ("max_position_embeddings", "n_positions", "max_seq_len"):
        if isinstance(out.get(field), int):
            out[field] = min(out[field], MAX_POSITIONS)
    out.update(SPECIAL_IDS)
    out["torch_dtype"] = "float32"
    out.pop("dtype", None)
    # Untied: a tied random head scores the input token's own embedding highest, so the model copies its
    # input (measured, LFM2: tied 1 distinct token in 48, untied 42 in 48): output that cannot show lost state.
    out["tie_word_embeddings"] = False
    return out


def _shrink_tower(config: Mapping[str, Any]) -> dict[str, Any]:
    """A vision or audio tower at the text model's widths: only its size matters (the run sends text)."""
    out = copy.deepcopy(dict(config))
    for key in ("num_hidden_layers", "depth", "num_layers", "encoder_layers"):
        if isinstance(out.get(key), int):
            out[key] = min(out[key], MIN_LAYERS)
    _capped(out)
    for key in ("hidden_size", "d_model", "embed_dim", "out_hidden_size", "projection_dim", "output_dim"):
        if isinstance(out.get(key), int):
            out[key] = HIDDEN
    heads = [k for k in ("num_attention_heads", "num_heads", "encoder_attention_heads") if isinstance(out.get(k), int)]
    for key in heads or ["num_attention_heads"]:  # a default head count need not divide HIDDEN
        out[key] = HEADS
    if isinstance(out.get("num_key_value_heads"), int):
        out["num_key_value_heads"] = HEADS
    for key, value in list(out.items()):
        if isinstance(value, list) and len(value) > MIN_LAYERS and key.endswith(("layers", "indexes", "indices")):
            out[key] = [i for i in value if isinstance(i, int) and i < MIN_LAYERS] or value[:1]
    return out


def inconsistencies(config: Mapping[str, Any]) -> list[str]:
    """What still disagrees in a shrunk CONFIG (empty: nothing): heads and width, per-layer fields and the layer
    count, MoE counts, the Mamba state and the width; a nested ``text_config`` too."""
    problems = _problems(config)
    for nested in TEXT_KEYS:
        if isinstance(config.get(nested), Mapping):
            problems += [f"{nested}.{p}" for p in _problems(config[nested])]
    return problems


def _int(config: Mapping[str, Any], names: Sequence[str]) -> int | None:
    return next((config[n] for n in names if type(config.get(n)) is int), None)


def _problems(c: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    pure = c.get("model_type") in PURE_MAMBA2
    layers = _layer_count(c)
    if layers is not None:
        if layers > MAX_LAYERS:
            out.append(f"{layers} layers > {MAX_LAYERS}")
        for field in PATTERN_KEYS:
            value = c.get(field)
            if isinstance(value, (list, str)) and value and len(value) != layers:
                out.append(f"{field} has {len(value)} entries for {layers} layers")
        plc = c.get("per_layer_config")
        if isinstance(plc, Mapping) and any(not str(k).isdigit() or int(k) >= layers for k in plc):
            out.append(f"per_layer_config names layers past {layers}")
    heads = None if pure else _int(c, HEAD_KEYS)
    kv = _int(c, KV_KEYS)
    if heads and kv and heads % kv:
        out.append(f"{heads} attention heads are not a multiple of {kv} KV heads")
    experts = _int(c, ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"))
    per_tok = _int(c, ("num_experts_per_tok", "num_experts_per_token", "moe_top_k", "moe_topk", "top_k_experts"))
    if experts and per_tok and per_tok > experts:
        out.append(f"{per_tok} experts per token of {experts}")
    hidden = _int(c, HIDDEN_KEYS)
    mheads = _int(c, (*MAMBA_HEADS, "num_heads") if pure else MAMBA_HEADS)
    mdim = _int(c, (*MAMBA_HEAD_DIM, "head_dim") if pure else MAMBA_HEAD_DIM)
    expand = next((c[k] for k in MAMBA_EXPAND if isinstance(c.get(k), (int, float))), None)
    groups = _int(c, MAMBA_GROUPS)
    if mheads and groups and mheads % groups:
        out.append(f"{mheads} Mamba heads are not a multiple of {groups} groups")
    tied = c.get("model_type") not in UNTIED_MAMBA
    if tied and mheads and mdim and expand and hidden and mheads * mdim != expand * hidden:
        out.append(f"Mamba heads x head dim {mheads} x {mdim} != expand x hidden {expand} x {hidden}")
    return out
