"""vLLM 0.33's ``max_model_len``, restated: the model length a launch runs with, from config.json and the flags.

What vLLM derives (``ModelConfig.get_and_verify_max_len`` → ``_get_and_verify_max_len``, ``rules.MAX_LEN``):

1. the smallest of the length keys the text config sets (``rules.MAX_LEN_KEYS``, ``max_position_embeddings``
   first), where a truthy ``model_max_length`` (Command-R) wins outright; none of them: vLLM's 2048;
2. times the RoPE scaling ``factor`` of the rope parameters, except for the YaRN-like rope types (whose
   ``max_position_embeddings`` is already scaled) and Gemma 3 (already scaled);
3. with ``--disable-sliding-window``, capped at the sliding window;
4. ``--max-model-len`` unset or ``-1``/``auto``: that derived length (``longrope``: the config's
   ``original_max_position_embeddings``); a value above it: vLLM refuses to start (unless the config's
   ``model_max_length`` allows it); otherwise the value itself.

Where it is used: without prefix caching the Mamba block is ``max_model_len`` (``rules.MAMBA_BLOCK_MAX_LEN``,
``rules.MAMBA_SPEC_BLOCK``; ``specs.build_specs``). Malformed values of ``--max-model-len`` (``0``, below
``-1``) are exit 2 where the flag is parsed (``flags.py``); a well-formed length the model cannot take is a
start-up refusal (KVD114), like the tensor-parallel ones.

Not modelled: a pooling model's tokenizer ``model_max_length``, an encoder's ``max_seq_length``, the
``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`` override, a length key or rope default a transformers config class fills
in when config.json leaves it out (the length says so when no key was found), and the later shortening of
``auto`` to fit GPU memory (which does not reach the Mamba block, set before it).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from kvdoctor._exceptions import ConfigError
from kvdoctor.core.config import ModelConfig
from kvdoctor.core.record import record
from kvdoctor.core.vllm import rules
from kvdoctor.core.vllm.refusals import VllmRefusal

AUTO = -1  # --max-model-len -1 / auto (human_readable_int_or_auto)


@record(frozen=True)
class ModelLength:
    """The ``max_model_len`` a launch runs with, and how vLLM arrived at it."""

    tokens: int  # what vLLM runs with (on a refusal: the length the launch asked for)
    derived: float  # the length derived from config.json (before --max-model-len)
    key: str | None  # the config key it came from; None: no key, vLLM's default
    reason: str  # how, as a person reads it
    refusal: VllmRefusal | None = None  # --max-model-len above the derived length: vLLM will not start

    def describe(self) -> str:
        return f"{self.tokens} tokens: {self.reason}"


def _number(cfg: ModelConfig, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(f"{cfg.source}: field '{cfg.where(key)}' must be a positive number of tokens, got {value!r}")
    return value


def derived_length(cfg: ModelConfig) -> tuple[float, str | None]:
    """``derive_max_model_len_and_key``: the smallest length key of the text config (``model_max_length``
    when truthy wins); ``(inf, None)`` when it sets none (rules.MAX_LEN_KEYS)."""
    text = cfg.text
    derived, found = float("inf"), None
    for key in rules.MAX_LEN_KEYS:
        value = text.get(key)
        if value is None:
            continue
        value = _number(cfg, key, value)
        if value < derived:
            found = key
        derived = min(derived, value)
    command_r = text.get("model_max_length")
    if command_r:
        return _number(cfg, "model_max_length", command_r), "model_max_length"
    return derived, found


def _rope_parameters(text: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """``iter_rope_parameters`` over what transformers makes of ``rope_parameters`` / ``rope_scaling``: one
    dict, or one per layer type when nested (``is_rope_parameters_nested``)."""
    params = text.get("rope_parameters")
    if not isinstance(params, Mapping) or not params:
        params = text.get("rope_scaling")
    if not isinstance(params, Mapping) or not params:
        return
    if set(params) <= rules.ROPE_NESTING_KEYS:
        yield from (p for p in params.values() if isinstance(p, Mapping) and p)
    else:
        yield params


def _rope_type(params: Mapping[str, Any]) -> str:
    """``rope_type``, or the legacy ``type`` (``patch_legacy_rope_type``); transformers' default is ``default``."""
    return str(params.get("rope_type") or params.get("type") or "default")


def rope_factor(cfg: ModelConfig) -> tuple[float, str | None]:
    """The scaling factor vLLM multiplies the derived length by, and the rope type it came from (None: 1.0
    because no rope parameter scales it)."""
    params = list(_rope_parameters(cfg.text))
    if not params or "gemma3" in cfg.text_model_type:
        return 1.0, None
    factor: Any = 1.0
    source = None
    for p in params:
        rope_type = _rope_type(p)
        if rope_type not in rules.ROPE_PRESCALED and "factor" in p:
            factor, source = p.get("factor"), rope_type
    if factor is None:  # a null factor: vLLM warns and falls back to 1.0
        return 1.0, None
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor <= 0:
        raise ConfigError(f"{cfg.source}: the RoPE scaling factor must be a positive number, got {factor!r}")
    return float(factor), source


def _tokens(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def max_model_len(cfg: ModelConfig, asked: int | None = None, *, disable_sliding_window: bool = False) -> ModelLength:
    """The ``max_model_len`` vLLM runs CFG with under ``--max-model-len ASKED`` (None: not given)."""
    derived, key = derived_length(cfg)
    window = cfg.text.get("sliding_window")
    if disable_sliding_window and isinstance(window, int) and 0 < window < derived:
        derived, key = window, "sliding_window"
    if derived == float("inf"):
        if asked is not None and asked != AUTO:  # vLLM returns the asked length unchecked
            return ModelLength(asked, derived, None, "--max-model-len (config.json sets no length key)")
        derived = rules.DEFAULT_MAX_MODEL_LEN
        key_text = f"config.json sets none of {', '.join(rules.MAX_LEN_KEYS)}: vLLM's default {derived}"
        key_text += " (a transformers config class default would win)"
    else:
        key_text = f"{key}={_tokens(derived)}"
    factor, rope_type = rope_factor(cfg)
    if rope_type is not None:
        derived *= factor
        key_text += f" x {rope_type} RoPE factor {_tokens(factor)}"
    params = list(_rope_parameters(cfg.text))
    if asked is None or asked == AUTO:
        how = "derived" if asked is None else "--max-model-len auto: derived"
        if any(_rope_type(p) == "longrope" for p in params):
            original = cfg.text.get("original_max_position_embeddings")
            tokens = int(_number(cfg, "original_max_position_embeddings", original)) if original else int(derived)
            return ModelLength(tokens, derived, key, f"{how}, longrope: original_max_position_embeddings")
        return ModelLength(int(derived), derived, key, f"{how} from {key_text}")
    if asked > derived:
        allowed = cfg.text.get("model_max_length")
        if allowed is None or asked > allowed:
            message = rules.MAX_LEN_REFUSED.format(
                asked=asked, key=key, derived=_tokens(derived), model_max_length=allowed
            )
            refusal = VllmRefusal(message, rules.MAX_LEN_CHECK)
            return ModelLength(asked, derived, key, f"--max-model-len {asked}, above {key_text}", refusal)
    return ModelLength(asked, derived, key, f"--max-model-len (config: {key_text})")
