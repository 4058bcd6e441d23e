"""Per-layer kind lists as SGLang's config classes normalise them before any rule reads them."""

from __future__ import annotations

from kvdoctor.core import rules
from kvdoctor.core.config import ModelConfig
from kvdoctor.errors import ConfigError


def granite_layer_types(cfg: ModelConfig) -> list[str]:
    """GraniteMoeHybridConfig: transformers' newer spellings mapped back; a default when absent."""
    kinds = cfg.get("layer_types")
    if kinds is None:
        every = rules.GRANITE_DEFAULT_ATTENTION_EVERY
        layers = cfg.positive_int("num_hidden_layers")
        return ["attention" if (i + 1) % every == 0 else "mamba" for i in range(layers)]
    return [rules.GRANITE_LAYER_ALIASES.get(k, k) for k in _string_list(cfg, "layer_types", kinds)]


def minicpm_mixer_types(cfg: ModelConfig) -> list[str]:
    """MiniCPMHybridConfig: aliases resolved, then the list tiled over num_hidden_layers."""
    layers = cfg.positive_int("num_hidden_layers")
    kinds = _string_list(cfg, "mixer_types", cfg.get("mixer_types") or ["minicpm4"])
    if len(kinds) > layers:
        raise ConfigError(f"{cfg.source}: mixer_types has {len(kinds)} entries for {layers} layers")
    unknown = sorted(set(kinds) - set(rules.MINICPM_MIXER_ALIASES))
    if unknown:
        raise ConfigError(f"{cfg.source}: unsupported mixer type(s) {unknown}")
    kinds = [rules.MINICPM_MIXER_ALIASES[k] for k in kinds]
    return (kinds * -(-layers // len(kinds)))[:layers]


def _string_list(cfg: ModelConfig, key: str, value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{cfg.source}: field '{key}' must be a list of strings")
    return value
