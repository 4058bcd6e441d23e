"""Whether a config's ``model_type`` is one the server's config loader can build.

SGLang (``get_config``) and vLLM (``transformers_utils/config.py``) both turn ``config.json`` into a
config object through transformers' ``AutoConfig``, after registering their own config classes; a
``model_type`` neither knows makes ``AutoConfig.from_pretrained`` raise, so the server does not
start. Read leniently, such a config would be analysed by its architecture alone and pass. The
known names are data generated from each server's own loader (``sglang/_generated/model_types.py``,
``vllm/_generated/model_types.py``); this module only looks them up, and a refusal is exit 2 naming the file,
the field and, where one is close, the model type meant.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Mapping

from kvdoctor._exceptions import UnknownModelError
from kvdoctor.core.config import ModelConfig
from kvdoctor.text import shown

_NOT_A_NAME = re.compile(r"[^A-Za-z0-9_.\-]+")


def declares_remote_config(cfg: ModelConfig) -> bool:
    """``auto_map.AutoConfig``: the checkpoint ships its own config class (loaded only with
    ``--trust-remote-code``); kvdoctor evaluates no remote code, so it cannot say which model types
    that class accepts and does not refuse them."""
    auto_map = cfg.top.get("auto_map")
    return isinstance(auto_map, Mapping) and "AutoConfig" in auto_map


def suggestion(word: str, known: Collection[str]) -> str:
    """``; did you mean X?`` for the known name closest to WORD (or to WORD without stray markup)."""
    names = sorted(known)
    for candidate in dict.fromkeys((word, _NOT_A_NAME.sub("", word), word.lower())):
        close = difflib.get_close_matches(candidate, names, n=1, cutoff=0.6)
        if close:
            return f"; did you mean {close[0]!r}?"
    return ""


def check_model_type(cfg: ModelConfig, known: Collection[str], server: str, where: str) -> None:
    """Refuse (``UnknownModelError``, exit 2) a top-level ``model_type`` SERVER's config loader cannot build
    (WHERE: the server's file and lines that raise)."""
    model_type = cfg.model_type
    if model_type in known or declares_remote_config(cfg):
        return
    raise UnknownModelError(
        f"{cfg.source}: field 'model_type' = {shown(repr(model_type), 80)} is not a model type {server} "
        f"can load: its AutoConfig.from_pretrained raises ({where}){suggestion(model_type, known)}"
    )
