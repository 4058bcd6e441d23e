"""What a server's config class derives from ``config.json`` before any rule reads it (both servers' loaders).

``config.py`` loads the file for either server; where the file leaves a field out, the config class
computes it from another, and kvdoctor reads the computed value (``ModelConfig.derived``). These are
facts of SGLang's config classes. The values live here only; their citations are made where the SGLang
rule model cites (``core/sglang/rules/layers.py``: ``LONGCAT_LAYERS_SOURCE``, ``NEMOTRON_H_COUNT_SOURCE``), so
the engine suite checks them against the installed SGLang. This module imports nothing of kvdoctor's but the
generated alias table beside it: the shared loader must not depend on a server's room.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvdoctor.core.config_aliases import CONFIG_ALIASES

# LongcatFlashConfig takes its layer count from num_layers when num_hidden_layers is absent
# (srt/configs/longcat_flash.py:81-83, rules.LONGCAT_LAYERS_SOURCE).
LONGCAT_MODEL_TYPES = frozenset({"longcat_flash"})
# Nemotron-H's layer list is canonical; its length is the layer count
# (srt/configs/nemotron_h.py:441-447, rules.NEMOTRON_H_COUNT_SOURCE).
NEMOTRON_H_MODEL_TYPES = frozenset({"nemotron_h", "nemotron_h_puzzle"})
# Gemma 3n states its MLP width per layer: transformers' Gemma3nTextConfig keeps one intermediate_size per
# layer (a number becomes that list) and SGLang's decoder layer reads its own entry
# (srt/models/gemma3n_causal.py:523, rules.GEMMA3N_INTERMEDIATE_SOURCE).
PER_LAYER_INTERMEDIATE_MODEL_TYPES = frozenset({"gemma3n", "gemma3n_text"})
# The geometry fields a config class may store under its own name (transformers' ``attribute_map``: GPT-2's
# ``n_layer``, ChatGLM's ``num_layers``), resolved as ``PretrainedConfig`` does when the file does not state the
# standard name (the table: ``config_aliases.py``, generated from the classes SGLang's loader builds). Other
# aliased fields (``layer_types`` of the Mamba hybrids, expert counts) keep their per-family rules.
ALIASED_FIELDS = (
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
)


def derived_fields(text: Mapping[str, Any], model_type: str) -> dict[str, Any]:
    """Fields the config class computes from others when the file (its text config TEXT) does not state them."""
    derived: dict[str, Any] = {}
    if text.get("num_hidden_layers") is None:
        if model_type in LONGCAT_MODEL_TYPES and text.get("num_layers") is not None:
            derived["num_hidden_layers"] = text["num_layers"]
        blocks = text.get("layers_block_type")
        if model_type in NEMOTRON_H_MODEL_TYPES and isinstance(blocks, list):
            derived["num_hidden_layers"] = len(blocks)

    aliases = CONFIG_ALIASES.get(model_type, {})
    for name in ALIASED_FIELDS:
        stored = aliases.get(name)
        if stored and name not in derived and text.get(name) is None and text.get(stored) is not None:
            derived[name] = text[stored]
    return derived
