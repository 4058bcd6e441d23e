"""One call from a model name and a launch line to every verdict ``inspect`` reports."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kvdoctor.core.config import ModelConfig, load_config
from kvdoctor.core.record import record
from kvdoctor.core.registry import Hazard, find_hazards
from kvdoctor.core.sglang import rules
from kvdoctor.core.sglang.families import Classification, classify, is_dsa, is_dsv4, is_mla
from kvdoctor.core.sglang.flags import ServerFlags, parse_flags
from kvdoctor.core.sglang.hazards import Context
from kvdoctor.core.sglang.policy import (
    DEFAULT_PLATFORM,
    BackupDecision,
    Platform,
    PoolLayout,
    decide_backup,
    pd_state_types,
    pool_layout,
)
from kvdoctor.core.sglang.refusals import Refusal, launch_refusals
from kvdoctor.core.sglang.sizing import Sizing, size_pools
from kvdoctor.core.sglang.spec import StateSpec, build_spec


@record(frozen=True)
class Analysis:
    """Everything the rule model decided for one model and launch line, with the inputs it read."""

    config: ModelConfig
    flags: ServerFlags
    classification: Classification
    spec: StateSpec
    layout: PoolLayout
    backup: BackupDecision
    pd_state_types: tuple[str, ...]
    sizing: Sizing
    hazards: tuple[Hazard, ...]
    refusals: tuple[Refusal, ...] = ()  # what SGLang refuses at start-up (each is a KVD014 hazard too)
    platform: Platform = DEFAULT_PLATFORM
    rules_revision: str = rules.RULES_REVISION

    @property
    def refused(self) -> bool:
        """SGLang 0.5.23 would not start with this launch."""
        return bool(self.refusals)

    @property
    def worst_severity(self) -> str | None:
        order = ("error", "warning", "info")
        found = {h.severity for h in self.hazards}
        return next((s for s in order if s in found), None)


def model_overrides(config: ModelConfig, flags: ServerFlags, platform: Platform = DEFAULT_PLATFORM) -> ServerFlags:
    """What SGLang's model-specific override hooks change before anything reads the flags.

    Step 3.5 / 3.7 under hierarchical cache drop hybrid SWA and take an SWA ratio of 1.0
    (``rules.STEP_HICACHE_SOURCE``); a launch that names no attention backend gets the one SGLang picks
    on PLATFORM's GPU (``default_attention_backend``); DeepSeek DSA's unset KV dtype follows the GPU
    (``rules.DSA_KV_DTYPE_SOURCE``).
    """
    archs = set(config.architectures)
    changes: dict[str, object] = {}
    if archs & rules.STEP_HICACHE_ARCHS and flags.enable_hierarchical_cache:
        changes.update(disable_hybrid_swa_memory=True, swa_full_tokens_ratio=rules.STEP_HICACHE_SWA_RATIO)
    if is_dsa(config) and flags.kv_cache_dtype == "auto" and not config.get("learnable_sink"):
        changes["kv_cache_dtype"] = rules.DSA_KV_DTYPE_AUTO[platform.gpu_arch]
    changes.update(default_attention_backend(config, flags, platform))
    return dataclasses.replace(flags, **changes) if changes else flags


def _radix_cache_on(config: ModelConfig, flags: ServerFlags) -> bool:
    return not (
        flags.disable_radix_cache
        or (flags.is_decode and not flags.disaggregation_decode_enable_radix_cache)
        or config.model_type in rules.RADIX_OFF_MODEL_TYPES
    )


def _asymmetric_kv(config: ModelConfig) -> bool:
    """ModelConfig.has_asymmetric_kv: K and V rows of different widths (a config that names both)."""
    head_dim, v_head_dim = config.get("head_dim"), config.get("v_head_dim")
    swa_head_dim, swa_v_head_dim = config.get("swa_head_dim"), config.get("swa_v_head_dim")
    return bool(
        (head_dim and v_head_dim and head_dim != v_head_dim)
        or (swa_head_dim and swa_v_head_dim and swa_head_dim != swa_v_head_dim)
    )


def default_attention_backend(config: ModelConfig, flags: ServerFlags, platform: Platform) -> dict[str, object]:
    """The attention backend (and page size, where the override writes one) SGLang fills in on PLATFORM.

    A model override first, when every backend flag is unset (``rules.MODEL_ATTENTION_BACKENDS_SOURCE``,
    ``SSM_ONLY_BACKENDS_SOURCE``, ``RADIX_TRITON_SOURCE``); then ``get_default_attn_backend`` for an
    unset --attention-backend (``rules.GENERIC_BACKEND_SOURCE``, ``DEFAULT_BACKEND_SOURCE``).
    """
    arch, gpu = config.architecture, platform.gpu_arch
    none_set = not any((flags.attention_backend, flags.decode_attention_backend, flags.prefill_attention_backend))
    if platform.hip or flags.attention_backend is not None:
        return {}
    if arch in rules.IQUEST_Q1_ARCHS:  # rules.IQUEST_Q1_BACKEND_SOURCE: FA3 wherever no flag names one
        return {"attention_backend": rules.IQUEST_Q1_BACKEND}
    prefill = flags.prefill_attention_backend
    if prefill is not None and prefill == flags.decode_attention_backend:
        return {"attention_backend": prefill}
    mla = is_mla(config)
    kinds = "mla" if mla else "mha"
    if not mla and _asymmetric_kv(config):
        kinds = "mha_asymmetric_kv"
    generic = rules.GENERIC_BACKENDS.get((gpu, kinds))
    if arch in rules.RADIX_TRITON_ARCHS and platform.is_sm100:
        backend = "triton"
        if generic == "trtllm_mha" and not (
            _radix_cache_on(config, flags) and flags.mamba_radix_cache_strategy != "extra_buffer"
        ):
            backend = "trtllm_mha"
        return {"attention_backend": backend, "page_size": rules.RADIX_TRITON_PAGES[backend]}
    if is_dsa(config) or is_dsv4(config):  # their own backends (dsa, dsv4); pages: resolve_flags
        return {}
    picked = None
    if none_set:
        picked = rules.MODEL_ATTENTION_BACKENDS.get(arch, {}).get(gpu)
        has_ssm = "mamba" in (config.get("layer_types") or [])
        if picked is None and has_ssm:
            picked = rules.SSM_ONLY_BACKENDS.get(arch, {}).get(gpu)
    picked = picked or generic
    return {"attention_backend": picked} if picked else {}


def resolve_flags(
    config: ModelConfig, cls: Classification, flags: ServerFlags, platform: Platform = DEFAULT_PLATFORM
) -> ServerFlags:
    """The page size SGLang resolves for this model: a model override first (DSA 64 per pooled index
    group, DeepSeek-V4 256), then the attention backends' page rules (MLA backends, TensorRT-LLM MHA,
    FA4 on SM100)."""
    page = flags.page_size
    if cls.is_dsa:  # rules.DSA_PAGE_SOURCE
        page = rules.DSA_PAGE_PER_KPOOL * config.positive_int("index_kpool", 1)
    elif cls.is_dsv4:  # rules.DSV4_OVERRIDES_SOURCE
        page = rules.DSV4_PAGE_SIZE
    for backend, sizes in rules.MLA_PAGE_SIZES.items():  # rules.MLA_PAGE_SOURCE
        if flags.uses_backend(backend) and page not in sizes:
            page = rules.MLA_PAGE_SIZE
    if flags.uses_backend("trtllm_mha") and page not in rules.TRTLLM_MHA_PAGE_SIZES:  # rules.TRTLLM_MHA_PAGE_SOURCE
        page = rules.TRTLLM_MHA_PAGE_SIZE
    if (  # rules.FA4_PAGE_SOURCE
        flags.uses_fa4
        and platform.is_sm100
        and not cls.is_mla
        and not set(config.architectures) & rules.FA4_PAGE_EXEMPT_ARCHS
    ):
        page = rules.FA4_PAGE_SIZE
    return dataclasses.replace(flags, page_size=page) if page != flags.page_size else flags


def derived_context_length(config: ModelConfig) -> int:
    """get_context_length (``rules.CONTEXT_LENGTH_SOURCE``): the first context field the text config
    sets, scaled by its rope_scaling factor unless the scaling names original_max_position_embeddings
    or is llama3 rope; 2048 when none is set."""
    scaling = config.get("rope_scaling")
    factor: float = 1
    if isinstance(scaling, dict) and scaling:
        factor = scaling.get("factor", 1) if isinstance(scaling.get("factor", 1), (int, float)) else 1
        if "original_max_position_embeddings" in scaling or scaling.get("rope_type") == "llama3":
            factor = 1
    for key in rules.CONTEXT_LENGTH_KEYS:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return int(factor * value)
    return rules.CONTEXT_LENGTH_FALLBACK


def context_length(config: ModelConfig, flags: ServerFlags) -> int:
    """The context length SGLang serves: --context-length, else the model's own."""
    return flags.context_length or derived_context_length(config)


def analyze_config(config: ModelConfig, flags: ServerFlags, platform: Platform = DEFAULT_PLATFORM) -> Analysis:
    """Every verdict for CONFIG (validated when it was parsed) under FLAGS.

    Bad input is refused where it enters (``config``/``config_checks``, ``flags``) with the field or flag
    named; an exception raised past that point is a kvdoctor bug and is left to surface as one (exit 4).
    """
    page_given = flags.page_size  # --page-size as launched, before a model's own page size is resolved
    flags = model_overrides(config, flags, platform)
    cls = classify(config, disable_hybrid_swa_memory=flags.disable_hybrid_swa_memory)
    flags = resolve_flags(config, cls, flags, platform)
    spec = build_spec(config, cls, flags)
    layout = pool_layout(spec, decode=flags.is_decode)
    sizing = size_pools(spec, flags, config.model_type)
    pool_tokens = sizing.full_tokens or sizing.swa_tokens
    backup = decide_backup(
        spec, layout, flags, platform, pool_tokens=pool_tokens, context_len=context_length(config, flags)
    )
    refusals = launch_refusals(
        config, flags, spec, layout, backup.backend, derived_context_length(config), platform, page_given
    )
    return Analysis(
        config=config,
        flags=flags,
        classification=cls,
        spec=spec,
        layout=layout,
        backup=backup,
        pd_state_types=pd_state_types(spec, layout),
        sizing=sizing,
        hazards=find_hazards("sglang", Context(spec, layout, backup, flags, sizing, refusals, platform)),
        refusals=refusals,
        platform=platform,
    )


def analyze(model: str, server_argv: Sequence[str] = (), *, platform: Platform = DEFAULT_PLATFORM) -> Analysis:
    """MODEL (path, directory, fixture name or cached Hub id) under the SGLang flags SERVER_ARGV, served
    on PLATFORM (a CUDA SM100 GPU unless told otherwise, as ``--engine sglang`` assumes)."""
    return analyze_config(load_config(model), parse_flags(server_argv), platform)
