"""``--shrink``: any config made tiny, keeping every layer kind and the order they come in.

Pure data (a dict in, a dict out), so a test checks every rule without torch. Per-layer fields (a
list or a pattern string as long as ``num_hidden_layers``: ``layer_types``, ``hybrid_override_pattern``,
``layers_block_type`` …) are cut to the same few layer indices: the shortest prefix of the model that
holds every kind (2 to 4 layers), or, when a kind first appears later, the first layer of each kind in
model order. Widths go to ``hidden_size`` 128 with small heads, the vocabulary to 1,024 tokens, and the
dtype to float32 (random weights give near-flat logits; bf16 rounding flips near-ties), and the output
head is untied from the embeddings.

``server="vllm"`` also makes a Mamba2 state small (:data:`VLLM_MAMBA_STATE`): vLLM raises its attention block
until one attention page holds a whole Mamba state (``Platform._align_hybrid_block_size``), so the full-size
state a shrunk NemotronH keeps (128 heads x 64 x 128) padded its attention blocks to 8,448 tokens, and a short
request never grew a block: vLLM queued instead of preempting. With this state the block stays at the CPU's 32.
The SGLang shrink is unchanged (SGLang sizes its Mamba pool apart from its KV pages).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

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
# Index lists of layers (LFM2's full_attn_idxs): recomputed from the kept layers.
INDEX_KEYS = ("full_attn_idxs", "attn_layer_indices", "linear_attn_layer_indices")
DROP_KEYS = ("quantization_config", "compression_config", "auto_map", "_name_or_path")
CAPS = {
    "num_local_experts": 4,
    "num_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "moe_intermediate_size": MOE_INTERMEDIATE,
    "shared_expert_intermediate_size": MOE_INTERMEDIATE,
}
SERVERS = ("sglang", "vllm")
# --server vllm: a Mamba2 state (NemotronH's fields, the ones kvdoctor's vLLM state model reads) of 8 heads x 16
# x 16 in 1 group: 10,112 B in float32 (conv 3 x 160 + SSM 8 x 16 x 16), within one 32-token attention page
# (2 KV heads x (32 + 32) x 4 B x 32 = 16,384 B), so vLLM keeps a 32-token attention block; 8 x 16 = HIDDEN.
VLLM_MAMBA_STATE = {"mamba_num_heads": 8, "mamba_head_dim": 16, "ssm_state_size": 16, "n_groups": 1}


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


def _kinds(config: Mapping[str, Any]) -> tuple[str | None, Sequence[Any]]:
    layers = config.get("num_hidden_layers")
    for key in PATTERN_KEYS:
        value = config.get(key)
        if isinstance(value, (list, str)) and value and (layers is None or len(value) == layers):
            return key, value
    idxs = config.get("full_attn_idxs")
    if isinstance(layers, int) and isinstance(idxs, list):
        return None, ["full_attention" if i in idxs else "conv" for i in range(layers)]
    return None, []


def shrink(config: Mapping[str, Any], *, server: str = "sglang") -> dict[str, Any]:
    """A tiny copy of CONFIG (a nested ``text_config`` is shrunk too), for SERVER's pools."""
    if server not in SERVERS:
        raise ValueError(f"shrink: server must be one of {', '.join(SERVERS)}, got {server!r}")
    out = _shrink_one(config, server)
    for nested in ("text_config", "llm_config"):
        if isinstance(out.get(nested), Mapping):
            out[nested] = _shrink_one(out[nested], server)
    return out


def small_mamba_state(config: Mapping[str, Any]) -> dict[str, int]:
    """The Mamba2 fields ``server="vllm"`` sets in CONFIG (empty for a model without them)."""
    if not all(isinstance(config.get(k), int) for k in VLLM_MAMBA_STATE):
        return {}
    return dict(VLLM_MAMBA_STATE)


def _shrink_one(config: Mapping[str, Any], server: str = "sglang") -> dict[str, Any]:
    out = copy.deepcopy(dict(config))
    for key in DROP_KEYS:
        out.pop(key, None)
    layers = out.get("num_hidden_layers")
    key, kinds = _kinds(out)
    keep = kept_layers(list(kinds))
    if isinstance(layers, int):
        for field, value in list(out.items()):
            if isinstance(value, list) and len(value) == layers and field not in INDEX_KEYS:
                out[field] = [value[i] for i in keep]
            elif isinstance(value, str) and field in PATTERN_KEYS and len(value) == layers:
                out[field] = "".join(value[i] for i in keep)
        out["num_hidden_layers"] = len(keep)
    if kinds and "full_attn_idxs" in out:
        out["full_attn_idxs"] = [n for n, i in enumerate(keep) if kinds[i] in ("full_attention", "attention")]
    heads = out.get("num_attention_heads")
    kv = out.get("num_key_value_heads")
    out["hidden_size"] = HIDDEN
    out["num_attention_heads"] = HEADS
    out["num_key_value_heads"] = HEADS if kv is None or kv == heads else KV_HEADS
    if "head_dim" in out:
        out["head_dim"] = HEAD_DIM
    for field in ("intermediate_size", "block_ff_dim", "ffn_dim"):
        if field in out:
            out[field] = INTERMEDIATE
    if "block_auto_adjust_ff_dim" in out:
        out["block_auto_adjust_ff_dim"] = False
    for field, cap in CAPS.items():
        if isinstance(out.get(field), int):
            out[field] = min(out[field], cap)
    out["vocab_size"] = VOCAB
    if isinstance(out.get("max_position_embeddings"), int):
        out["max_position_embeddings"] = min(out["max_position_embeddings"], MAX_POSITIONS)
    out.update(SPECIAL_IDS)
    out["torch_dtype"] = "float32"
    out.pop("dtype", None)
    # Untied: a tied random head scores the input token's own embedding highest, so the model copies its
    # input (measured, LFM2: tied 1 distinct token in 48, untied 42 in 48): output that cannot show lost state.
    out["tie_word_embeddings"] = False
    if server == "vllm":
        out.update(small_mamba_state(out))
    return out
