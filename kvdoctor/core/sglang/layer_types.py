"""Per-layer kind lists as SGLang's config classes normalise them before any rule reads them.

Every family that reads a per-layer list reads it through here, so each list is checked the same
way before a layer is counted: a list of strings (a plain string is not), exactly one entry per layer
(Step 3.5/3.7 list MTP layers past the end, which SGLang ignores), and only the kinds that family
counts: SGLang silently drops a layer of any other name, which would be a wrong answer, not an error.
"""

from __future__ import annotations

from collections.abc import Collection

from kvdoctor._exceptions import ConfigError
from kvdoctor.core.config import ModelConfig
from kvdoctor.core.sglang import rules


def layer_kinds(
    cfg: ModelConfig, key: str, kinds: Collection[str], *, aliases: dict[str, str] | None = None, extra_ok: bool = False
) -> list[str]:
    """CFG's KEY list, one entry per layer, each (after ALIASES) one of KINDS; EXTRA_OK keeps entries
    past ``num_hidden_layers`` out of the answer instead of refusing them."""
    layers = cfg.positive_int("num_hidden_layers")
    where = cfg.where(key)
    value = _string_list(cfg, key, cfg.require(key))
    if len(value) < layers or (len(value) > layers and not extra_ok):
        raise ConfigError(
            f"{cfg.source}: field '{where}' has {len(value)} entries for {layers} layers "
            "(num_hidden_layers); one per layer is required"
        )
    value = [(aliases or {}).get(k, k) for k in value[:layers]]
    unknown = sorted(set(value) - set(kinds))
    if unknown:
        raise ConfigError(
            f"{cfg.source}: field '{where}' names unknown layer kind(s) {unknown}; "
            f"{cfg.model_type} layers are one of {sorted(kinds)}"
        )
    return value


def granite_layer_types(cfg: ModelConfig) -> list[str]:
    """GraniteMoeHybridConfig: transformers' newer spellings mapped back; a default when absent."""
    if cfg.get("layer_types") is None:
        every = rules.GRANITE_DEFAULT_ATTENTION_EVERY
        layers = cfg.positive_int("num_hidden_layers")
        return ["attention" if (i + 1) % every == 0 else "mamba" for i in range(layers)]
    return layer_kinds(cfg, "layer_types", rules.GRANITE_LAYER_KINDS, aliases=rules.GRANITE_LAYER_ALIASES)


def lfm2_layer_types(cfg: ModelConfig) -> list[str]:
    """Lfm2Config: full_attention layers hold KV, conv / short_conv layers a conv state."""
    return layer_kinds(cfg, "layer_types", rules.LFM2_LAYER_KINDS)


def jet_layer_types(cfg: ModelConfig) -> list[str]:
    """JetNemotronConfig: attn / swa layers hold KV, jet layers recurrent state."""
    return layer_kinds(cfg, "layer_types", rules.JET_LAYER_KINDS)


def swa_layer_types(cfg: ModelConfig) -> list[str]:
    """A hybrid-SWA model's full_attention / sliding_attention per layer (get_hybrid_layer_ids).

    Gemma 4's config class makes the last layer full attention whatever the file says
    (``rules.GEMMA4_LAST_LAYER_FULL``)."""
    extra_ok = bool(set(cfg.architectures) & rules.LAYER_TYPES_LIST_MTP_ARCHS)
    kinds = layer_kinds(cfg, "layer_types", rules.SWA_LAYER_KINDS, extra_ok=extra_ok)
    if cfg.text_model_type in rules.GEMMA4_TEXT_MODEL_TYPES and kinds:
        kinds[-1] = "full_attention"
    return kinds


def qwen4_layer_types(cfg: ModelConfig) -> list[str]:
    """Qwen4ExpTextConfig.layers_block_type: its attention kinds read as "attention", linear_attention
    as GDN (``rules.QWEN4_LAYER_TYPES_SOURCE``)."""
    kinds = layer_kinds(cfg, "layer_types", rules.QWEN4_ATTENTION_KINDS | {rules.GDN_LINEAR_KIND})
    return ["attention" if k in rules.QWEN4_ATTENTION_KINDS else k for k in kinds]


def gigachat_layer_types(cfg: ModelConfig) -> list[str]:
    """GigaChat35Config._resolve_layer_types: layer_types, else full_attention_layers, else all linear."""
    layers = cfg.positive_int("num_hidden_layers")
    if cfg.get("layer_types") is not None:
        kinds = layer_kinds(cfg, "layer_types", rules.GIGACHAT_ATTENTION_KINDS | {rules.GDN_LINEAR_KIND})
        return ["attention" if k in rules.GIGACHAT_ATTENTION_KINDS else k for k in kinds]
    kinds = [rules.GDN_LINEAR_KIND] * layers
    full = cfg.get("full_attention_layers")
    if full is not None:
        if not isinstance(full, list) or any(
            isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < layers for i in full
        ):
            raise ConfigError(
                f"{cfg.source}: field '{cfg.where('full_attention_layers')}' must list layer ids in [0, {layers - 1}]"
            )
        for i in full:
            kinds[i] = "attention"
    return kinds


def nemotron_h_layer_types(cfg: ModelConfig) -> list[str]:
    """NemotronHConfig: ``hybrid_override_pattern`` (one code per layer) or the canonical
    ``layers_block_type`` list, as pattern codes (M mamba, * attention, - mlp, E moe)."""
    pattern = cfg.get("hybrid_override_pattern")
    if pattern is not None:
        return list(pattern)
    kinds = layer_kinds(cfg, "layers_block_type", rules.NEMOTRON_H_KINDS)
    return [rules.NEMOTRON_H_KINDS[k] for k in kinds]


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
        raise ConfigError(f"{cfg.source}: field '{cfg.where(key)}' must be a list of strings (one per layer)")
    return value
