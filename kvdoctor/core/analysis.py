"""One call from a model name and a launch line to every verdict ``inspect`` reports."""

from __future__ import annotations

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


def analyze_config(config: ModelConfig, flags: ServerFlags) -> Analysis:
    cls = classify(config, disable_hybrid_swa_memory=flags.disable_hybrid_swa_memory)
    spec = build_spec(config, cls, flags)
    layout = pool_layout(spec)
    backup = decide_backup(spec, layout, flags)
    return Analysis(
        config=config,
        flags=flags,
        classification=cls,
        spec=spec,
        layout=layout,
        backup=backup,
        pd_state_types=pd_state_types(spec),
        sizing=size_pools(spec, flags),
        hazards=find_hazards(Context(spec, layout, backup, flags)),
    )


def analyze(model: str, server_argv: Sequence[str] = ()) -> Analysis:
    """MODEL (path, directory, fixture name or cached Hub id) under the SGLang flags SERVER_ARGV."""
    return analyze_config(load_config(model), parse_flags(server_argv))
