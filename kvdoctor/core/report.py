"""``inspect``'s one report object as plain data: what ``--json`` prints and the tables render."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from kvdoctor.core.analysis import Analysis
from kvdoctor.core.sizing import forecast
from kvdoctor.core.spec import PER_TOKEN


def _layers_by_kind(a: Analysis) -> dict[str, int]:
    spec = a.spec
    return {
        "total": spec.num_layers,
        "full_attention": spec.full.layers if spec.full else 0,
        "sliding_window": spec.swa.layers if spec.swa else 0,
        "recurrent": spec.recurrent.layers if spec.recurrent else 0,
    }


def _component(a: Analysis, c: Any) -> dict[str, Any]:
    per = "bytes_per_token" if c.index == PER_TOKEN else "bytes_per_request"
    return {
        "name": c.name,
        "pool": a.layout.pool_of(c.sub_pool),
        "sub_pool": c.sub_pool,
        "index": c.index,
        "dtype": c.dtype,
        "layers": c.layers,
        "shape_per_layer": [list(s) for s in c.shapes],
        per: c.bytes,
    }


def inspect_report(a: Analysis, request_tokens: int, concurrent: int) -> dict[str, Any]:
    """The JSON object ``kvdoctor inspect --json`` prints (keys are a public contract)."""
    cls = a.classification
    fc = forecast(a.sizing, a.spec, concurrent, request_tokens)
    return {
        "model": {
            "source": a.config.source,
            "model_type": a.config.model_type,
            "text_model_type": a.config.text_model_type,
            "architecture": a.config.architecture,
            "family": cls.family,
            "sglang_predicate": cls.predicate,
            "rule_source": cls.source,
            "is_hybrid_swa": cls.is_hybrid_swa,
            "is_mla": cls.is_mla,
            "layers": _layers_by_kind(a),
            "sliding_window": a.spec.sliding_window,
            "tp_size": a.spec.tp_size,
        },
        "kv_cache_dtype": a.spec.kv_dtype.flag,
        "components": [_component(a, c) for c in a.spec.components],
        "uses_ssm_state": cls.uses_ssm_state,
        "kv_pool": a.layout.kv_pool,
        "pools": asdict(a.layout),
        "cpu_copy_carries_mamba": a.layout.cpu_copy_carries_mamba,
        "caller_backs_up_mamba": a.layout.caller_backs_up_mamba,
        "retraction_backup": {
            "backend": a.backup.backend,
            "applies": a.backup.applies,
            "explicit": a.backup.explicit,
            "source": a.backup.source,
            "reasons": [asdict(c) for c in a.backup.conditions],
            "hicache_ratio": a.backup.hicache_ratio,
            "hicache_ratio_reason": a.backup.hicache_ratio_reason,
        },
        "pd_state_types": list(a.pd_state_types),
        "sizing": {**asdict(a.sizing), "forecast": {**asdict(fc), "will_retract": fc.will_retract}},
        "hazards": [asdict(h) for h in a.hazards],
        "refusals": [{"message": r.message, "where": r.where} for r in a.refusals],
        "not_modelled_flags": list(a.flags.not_modelled),
        "rules_revision": a.rules_revision,
    }
