"""Classify a model config the way SGLang does: recurrent family, hybrid SWA, MLA.

SGLang decides recurrent state by the config *class* registered for a ``model_type`` and decides
hybrid SWA and MLA by *architecture name*; kvdoctor reproduces both from ``config.json`` alone by
evaluating the tables in ``rules/``.
"""

from __future__ import annotations

from collections.abc import Callable

from kvdoctor._exceptions import UnknownModelError
from kvdoctor.core.cite import located, shown
from kvdoctor.core.config import ModelConfig
from kvdoctor.core.model_types import check_model_type
from kvdoctor.core.record import record
from kvdoctor.core.sglang import rules
from kvdoctor.core.sglang._generated.architectures import SGLANG_ARCHITECTURES
from kvdoctor.core.sglang._generated.model_types import SGLANG_MODEL_TYPES, SGLANG_MODEL_TYPES_VERSION
from kvdoctor.core.sglang._generated.transformers_causal_lm import TRANSFORMERS_CAUSAL_LM_MODEL_TYPES
from kvdoctor.core.sglang.layer_types import granite_layer_types, minicpm_mixer_types


def _draft_pattern_has_mamba(cfg: ModelConfig) -> bool:
    # Only a Nemotron-H *draft* model can lack mamba layers; kvdoctor inspects target models, but
    # a config that declares an MTP-only pattern without "M" is treated as the draft SGLang skips.
    pattern = cfg.get("mtp_hybrid_override_pattern")
    return not (cfg.get("is_draft_model") and pattern is not None and "M" not in pattern)


def _any_layer_is_mamba(cfg: ModelConfig) -> bool:
    return "mamba" in granite_layer_types(cfg)


def _bailing_uses_kda(cfg: ModelConfig) -> bool:
    # BailingHybridConfig.use_kda is "short_conv_kernel_size is not None" (bailing_hybrid.py:158).
    return cfg.get("short_conv_kernel_size") is not None


def _has_lightning_layers(cfg: ModelConfig) -> bool:
    return rules.LIGHTNING_MIXER in minicpm_mixer_types(cfg)


CONDITIONS: dict[str, Callable[[ModelConfig], bool]] = {
    "draft_pattern_has_mamba": _draft_pattern_has_mamba,
    "any_layer_is_mamba": _any_layer_is_mamba,
    "bailing_uses_kda": _bailing_uses_kda,
    "bailing_not_kda": lambda cfg: not _bailing_uses_kda(cfg),
    "has_lightning_layers": _has_lightning_layers,
}


@record(frozen=True)
class Classification:
    """What kind of state a model carries, and which SGLang rule said so."""

    family: str  # a FamilyRule.family, or "dense" / "mla" / "dsa" / "dsv4" / "hybrid_swa" (attention only)
    uses_ssm_state: bool
    is_hybrid_swa: bool
    is_mla: bool
    predicate: str | None  # the SGLang helper that matched, e.g. "mamba2_config"
    source: str
    is_dsa: bool = False  # DeepSeek sparse attention: a DSATokenToKVPool with an indexer key cache
    is_dsv4: bool = False  # DeepSeek-V4: its own DeepSeekV4TokenToKVPool
    transformers_backend: bool = False  # no SGLang model class: served through its Transformers backend


def _recurrent_rule(cfg: ModelConfig) -> rules.FamilyRule | None:
    for rule in rules.FAMILY_RULES:
        model_type = cfg.text_model_type if rule.on_text_config else cfg.model_type
        if model_type not in rule.model_types and cfg.model_type not in rule.model_types:
            continue
        if rule.condition is None or CONDITIONS[rule.condition](cfg):
            return rule
    return None


def is_hybrid_swa(cfg: ModelConfig, *, disable_hybrid_swa_memory: bool = False) -> bool:
    """``is_hybrid_swa_model`` and not ``--disable-hybrid-swa-memory``."""
    if disable_hybrid_swa_memory:
        return False
    archs = set(cfg.architectures)
    if archs & rules.HYBRID_SWA_ARCHS:
        if "BeamForCausalLM" in archs:
            return "sliding_attention" in (cfg.get("layer_types") or [])
        if "LagunaForCausalLM" in archs:
            return bool(cfg.get("sliding_window"))
        return True
    return bool(cfg.get("is_hybrid_swa"))


def is_mla(cfg: ModelConfig) -> bool:
    archs = set(cfg.architectures)
    if "PixtralForConditionalGeneration" in archs:
        return cfg.get("kv_lora_rank") is not None
    return bool(archs & rules.MLA_ARCHS)


def is_dsa(cfg: ModelConfig) -> bool:
    """is_deepseek_dsa: a DSA architecture whose config sets index_topk."""
    return cfg.architecture in rules.DSA_ARCHS and cfg.get("index_topk") is not None


def is_dsv4(cfg: ModelConfig) -> bool:
    return cfg.architecture in rules.DSV4_ARCHS


def is_known(cfg: ModelConfig) -> bool:
    """SGLang serves it: a registered architecture or a model type in the family tables."""
    known_types = {t for rule in rules.FAMILY_RULES for t in rule.model_types}
    known_types |= rules.ATTENTION_ONLY_MODEL_TYPES
    return (
        cfg.architecture in SGLANG_ARCHITECTURES
        or cfg.model_type in known_types
        or cfg.text_model_type in known_types
        or via_transformers(cfg)
    )


def via_transformers(cfg: ModelConfig) -> bool:
    """No SGLang class for the architecture, but transformers has a causal LM for the model type: SGLang
    appends its Transformers backend as the fallback (``rules.TRANSFORMERS_FALLBACK``)."""
    return cfg.architecture not in SGLANG_ARCHITECTURES and cfg.model_type in TRANSFORMERS_CAUSAL_LM_MODEL_TYPES


def check_loadable(cfg: ModelConfig) -> None:
    """SGLang's config loader must be able to build CFG: an unknown ``model_type`` makes its ``AutoConfig``
    raise (``rules.CONFIG_LOADER_SOURCE``), unless a LongCat architecture is loaded by its own class
    (``rules.LONGCAT_LOADER_SOURCE``). Exit 2, naming the file and the field."""
    if set(cfg.architectures) & rules.LONGCAT_LOADER_ARCHS:
        return
    check_model_type(
        cfg, SGLANG_MODEL_TYPES, f"SGLang {SGLANG_MODEL_TYPES_VERSION}", located(rules.CONFIG_LOADER_SOURCE)
    )


def classify(cfg: ModelConfig, *, disable_hybrid_swa_memory: bool = False) -> Classification:
    """Classify CFG; an ``UnknownModelError`` (exit 2) when SGLang would not know it."""
    if not is_known(cfg):
        raise UnknownModelError(
            f"{cfg.source}: model_type '{cfg.model_type}' (architecture "
            f"'{cfg.architecture or '?'}') is not one SGLang knows at {rules.RULES_REVISION}"
        )
    check_loadable(cfg)
    swa = is_hybrid_swa(cfg, disable_hybrid_swa_memory=disable_hybrid_swa_memory)
    mla = is_mla(cfg)
    dsa, dsv4 = is_dsa(cfg), is_dsv4(cfg)
    rule = _recurrent_rule(cfg)
    if rule is not None:
        return Classification(rule.family, True, swa, mla, rule.predicate, shown(rule.source), is_dsa=dsa)
    if via_transformers(cfg):
        return Classification(
            "dense", False, False, False, None, shown(rules.TRANSFORMERS_FALLBACK), transformers_backend=True
        )
    if dsv4:
        return Classification(
            "dsv4", False, swa, False, None, shown((rules.DSV4_SOURCE, rules.DSV4_POOL_SOURCE)), is_dsv4=True
        )
    if dsa:
        return Classification(
            "dsa", False, swa, mla, None, shown((rules.DSA_SOURCE, rules.DSA_POOL_SOURCE)), is_dsa=True
        )
    family = "mla" if mla else "hybrid_swa" if swa else "dense"
    source = rules.MLA_SOURCE if mla else rules.HYBRID_SWA_SOURCE if swa else rules.ATTENTION_ONLY_SOURCE
    return Classification(family, False, swa, mla, None, shown(source))
