"""One call from a model and a ``vllm serve`` line to everything ``inspect --server vllm`` reports."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvdoctor._exceptions import GroupingRefused
from kvdoctor.core import hazards as registry
from kvdoctor.core.config import ModelConfig, load_config
from kvdoctor.core.hazards import Hazard
from kvdoctor.core.vllm import rules
from kvdoctor.core.vllm.connectors import ConnectorVerdict, HybridManager, hybrid_manager, verdict
from kvdoctor.core.vllm.flags import VllmFlags, parse_vllm_flags
from kvdoctor.core.vllm.grouping import Group, kv_cache_groups
from kvdoctor.core.vllm.hazards import VllmContext
from kvdoctor.core.vllm.specs import ModelSpecs, SpecKind, build_specs

SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class VllmAnalysis:
    config: ModelConfig
    flags: VllmFlags
    specs: ModelSpecs
    hybrid: HybridManager
    groups: tuple[Group, ...] | None
    refusal: str | None
    refusal_where: rules.Cite | None
    connector: ConnectorVerdict
    hazards: tuple[Hazard, ...]

    @property
    def worst_severity(self) -> str | None:
        return min((h.severity for h in self.hazards), key=SEVERITY_ORDER.__getitem__, default=None)

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` object: plain data, stable keys."""
        specs = self.specs
        return {
            "server": "vllm",
            "rules_revision": rules.RULES_REVISION,
            "model": {
                "source": self.config.source,
                "model_type": self.config.model_type,
                "architecture": specs.architecture,
                "family": specs.family.value,
                "layers": len(specs.layers),
            },
            "block_size": {
                "tokens": specs.block_size,
                "reason": specs.block_size_reason,
                "mamba_state_bytes_before_padding": specs.mamba_page_padded_from,
            },
            "layer_specs": [
                {
                    "layer": name,
                    "spec": s.kind.value,
                    "block_size": s.block_size,
                    "page_size_bytes": s.page_size_bytes,
                    "bytes_per_token": s.bytes_per_token,
                    "detail": s.describe(),
                }
                for name, s in specs.layers.items()
            ],
            "hybrid_kv_cache_manager": {
                "enabled": self.hybrid.enabled,
                "reason": self.hybrid.reason,
                "where": str(self.hybrid.where) if self.hybrid.where else None,
            },
            "groups": None if self.groups is None else [_group_json(i, g) for i, g in enumerate(self.groups)],
            "refusal": None if self.refusal is None else {"message": self.refusal, "where": str(self.refusal_where)},
            "preemption": {"mode": "recompute", "backup": None, "where": str(rules.PREEMPT)},
            "connector": _connector_json(self.connector),
            "hazards": [{"severity": h.severity, "code": h.code, "message": h.message} for h in self.hazards],
        }


def _group_json(i: int, g: Group) -> dict[str, Any]:
    per_token = g.spec.bytes_per_token
    return {
        "group": i,
        "spec": g.kind.value,
        "layers": list(g.layer_names),
        "block_size": g.spec.block_size,
        "page_size_bytes": g.spec.page_size_bytes,
        "bytes_per_block": g.spec.page_size_bytes * len(g.layer_names),
        "bytes_per_token": None if per_token is None else per_token * len(g.layer_names),
        "per_request": g.kind is SpecKind.MAMBA,
        "padding_layers": g.padding_layers,
    }


def _connector_json(v: ConnectorVerdict) -> dict[str, Any] | None:
    if v.transfer is None:
        return None
    return {
        "name": v.transfer.connector,
        "source": v.transfer.source,
        "role": v.transfer.role,
        "supports_hma": v.supports_hma,
        "kind": v.rule.kind if v.rule else None,
        "where": str(v.rule.where) if v.rule else None,
        "groups": [
            {
                "group": r.group,
                "spec": r.kind,
                "layers": r.layers,
                "status": r.status.value,
                "reason": r.reason,
                "where": str(r.where),
            }
            for r in v.rows
        ],
    }


def analyze_vllm_config(config: ModelConfig, flags: VllmFlags) -> VllmAnalysis:
    specs = build_specs(config, flags)
    hybrid = hybrid_manager(flags, specs)
    groups: tuple[Group, ...] | None
    refusal, where = None, None
    try:
        groups = tuple(kv_cache_groups(specs.layers, hybrid_manager=hybrid.enabled))
    except GroupingRefused as exc:
        groups, refusal, where = None, str(exc), exc.where
    connector = verdict(flags, specs, None if groups is None else list(groups), refusal, where)
    ctx = VllmContext(flags, specs, groups, refusal, hybrid, connector)
    found = tuple(h for rule in registry.rules_for("vllm") for h in rule(ctx))
    found = tuple(sorted(found, key=lambda h: SEVERITY_ORDER[h.severity]))
    return VllmAnalysis(config, flags, specs, hybrid, groups, refusal, where, connector, found)


def analyze_vllm(model: str, argv: Sequence[str]) -> VllmAnalysis:
    """MODEL (path, directory, fixture or cached Hub id) under the vLLM flags ARGV."""
    return analyze_vllm_config(load_config(model), parse_vllm_flags(argv))
