"""One call from a model name and a launch line to every verdict ``inspect`` reports."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from kvdoctor.core import rules
from kvdoctor.core.config import ModelConfig, load_config
from kvdoctor.core.families import Classification, classify
from kvdoctor.core.flags import ServerFlags, parse_flags
from kvdoctor.core.hazards import Context, Hazard, find_hazards
from kvdoctor.core.policy import BackupDecision, PoolLayout, decide_backup, pd_state_types, pool_layout
from kvdoctor.core.sizing import Sizing, size_pools
from kvdoctor.core.spec import StateSpec, build_spec
from kvdoctor.core.validate import check_launch


@dataclass(frozen=True)
class Analysis:
    config: ModelConfig
    flags: ServerFlags
    classification: Classification
    spec: StateSpec
    layout: PoolLayout
    backup: BackupDecision
    pd_state_types: tuple[str, ...]
    sizing: Sizing
    hazards: tuple[Hazard, ...]
    rules_revision: str = rules.RULES_REVISION

    @property
    def worst_severity(self) -> str | None:
        order = ("error", "warning", "info")
        found = {h.severity for h in self.hazards}
        return next((s for s in order if s in found), None)


def resolve_flags(config: ModelConfig, cls: Classification, flags: ServerFlags) -> ServerFlags:
    """Flags SGLang's post-processing overrides for this model (arg_groups/overrides.py)."""
    if flags.uses_fa4 and not cls.is_mla and not set(config.architectures) & rules.FA4_PAGE_EXEMPT_ARCHS:
        return dataclasses.replace(flags, page_size=rules.FA4_PAGE_SIZE)
    return flags


def context_length(config: ModelConfig, flags: ServerFlags) -> int | None:
    value = flags.context_length or config.get("max_position_embeddings")
    return int(value) if isinstance(value, int) and value > 0 else None


def analyze_config(config: ModelConfig, flags: ServerFlags) -> Analysis:
    """Every verdict for CONFIG (validated when it was parsed) under FLAGS.

    Bad input is refused where it enters (``config``/``validate``, ``flags``) with the field or flag
    named; an exception raised past that point is a kvdoctor bug and is left to surface as one (exit 4).
    """
    cls = classify(config, disable_hybrid_swa_memory=flags.disable_hybrid_swa_memory)
    flags = resolve_flags(config, cls, flags)
    spec = build_spec(config, cls, flags)
    check_launch(config, flags, mla=cls.is_mla)
    layout = pool_layout(spec)
    sizing = size_pools(spec, flags)
    pool_tokens = sizing.full_tokens or sizing.swa_tokens
    backup = decide_backup(spec, layout, flags, pool_tokens=pool_tokens, context_len=context_length(config, flags))
    return Analysis(
        config=config,
        flags=flags,
        classification=cls,
        spec=spec,
        layout=layout,
        backup=backup,
        pd_state_types=pd_state_types(spec, layout),
        sizing=sizing,
        hazards=find_hazards(Context(spec, layout, backup, flags, sizing)),
    )


def analyze(model: str, server_argv: Sequence[str] = ()) -> Analysis:
    """MODEL (path, directory, fixture name or cached Hub id) under the SGLang flags SERVER_ARGV."""
    return analyze_config(load_config(model), parse_flags(server_argv))
