"""What a server's config class derives from ``config.json`` before any rule reads it (both servers' loaders).

``config.py`` loads the file for either server; where the file leaves a field out, the config class
computes it from another, and kvdoctor reads the computed value (``ModelConfig.derived``). These are
facts of SGLang's config classes. The values live here only; their citations are made where the SGLang
rule model cites (``core/sglang/rules/layers.py``: ``LONGCAT_LAYERS_SOURCE``, ``NEMOTRON_H_COUNT_SOURCE``), so
the engine suite checks them against the installed SGLang. This module imports nothing of kvdoctor's: the
shared loader must not depend on a server's room.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# LongcatFlashConfig takes its layer count from num_layers when num_hidden_layers is absent
# (srt/configs/longcat_flash.py:81-83, rules.LONGCAT_LAYERS_SOURCE).
LONGCAT_MODEL_TYPES = frozenset({"longcat_flash"})
# Nemotron-H's layer list is canonical; its length is the layer count
# (srt/configs/nemotron_h.py:441-447, rules.NEMOTRON_H_COUNT_SOURCE).
NEMOTRON_H_MODEL_TYPES = frozenset({"nemotron_h", "nemotron_h_puzzle"})


def derived_fields(text: Mapping[str, Any], model_type: str) -> dict[str, Any]:
    """Fields the config class computes from others when the file (its text config TEXT) does not state them."""
    derived: dict[str, Any] = {}
    if text.get("num_hidden_layers") is None:
        if model_type in LONGCAT_MODEL_TYPES and text.get("num_layers") is not None:
            derived["num_hidden_layers"] = text["num_layers"]
        blocks = text.get("layers_block_type")
        if model_type in NEMOTRON_H_MODEL_TYPES and isinstance(blocks, list):
            derived["num_hidden_layers"] = len(blocks)
    return derived
