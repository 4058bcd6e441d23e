"""``inspect --json``'s contract: the published schema holds for every mode's REAL output, the header's
verdict agrees with the exit code, and every key users parsed before is still there, with its value."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from typing import Any

import pytest

from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.core.sglang.analysis import Analysis, analyze
from kvdoctor.core.sglang.inspect_result import (
    FieldDrift,
    InspectBesideReport,
    LiveRefusal,
    ModelSource,
    RefusedInspectReport,
    SglangAnswers,
    inspect_report,
)
from kvdoctor.core.sglang.sizing import forecast
from kvdoctor.core.sglang.spec import PER_TOKEN
from kvdoctor.report.envelope import document, header
from tests.schema_check import assert_valid, errors

INKLING = ["inkling-small", "--kv-cache-dtype", "mxfp8", "--disaggregation-mode", "decode", "--page-size", "128"]
HOST_POOL = [*INKLING, "--disaggregation-decode-retraction-backup", "host_pool"]
LMCACHE = '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'

SGLANG_RULE_RUNS = [
    INKLING,
    HOST_POOL,
    [*HOST_POOL, "--strict"],
    ["llama-3.1-8b", "--max-total-tokens", "65536"],
    ["gpt-oss-20b", "--disaggregation-mode", "decode"],
    ["deepseek-v3", "--tp-size", "2"],
]
VLLM_RUNS = [
    ["qwen3-next-80b-a3b", "--server", "vllm", "--kv-offloading-size", "8"],
    ["gpt-oss-20b", "--server", "vllm", "--kv-transfer-config", LMCACHE],
    ["qwen3-next-80b-a3b", "--server", "vllm", "--kv-transfer-config", LMCACHE, "--strict"],
    ["qwen3-next-80b-a3b", "--server", "vllm", "--engine", "vllm"],  # vLLM answers, or the report says why not
]


def kvdoctor(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "kvdoctor", *args], capture_output=True, text=True, timeout=120, check=False, env=env
    )


def _ids(runs: list[list[str]]) -> list[str]:
    return [" ".join(r)[:60] for r in runs]


@pytest.mark.parametrize("args", SGLANG_RULE_RUNS + VLLM_RUNS, ids=_ids(SGLANG_RULE_RUNS + VLLM_RUNS))
def test_every_modes_real_output_validates_and_its_verdict_matches_the_exit_code(args: list[str]) -> None:
    out = kvdoctor("inspect", *args, "--json")
    assert out.returncode in (0, 1), out.stderr
    report = assert_valid(out.stdout, "inspect")
    assert report["command"] == "inspect" and report["exit_code"] == out.returncode
    assert report["command_line"] == ["kvdoctor", "inspect", *args, "--json"]
    strict = "--strict" in args
    errors_found = [h for h in report["hazards"] if h["severity"] == "error"]
    warned = [h for h in report["hazards"] if h["severity"] == "warning" or (h["severity"] == "error" and not strict)]
    assert out.returncode == (1 if strict and errors_found else 0)
    expected = "fail" if out.returncode else ("warn" if warned else "pass")
    assert report["verdict"] == expected
    assert report["warnings"] == [f"{h['code']} ({h['severity']}): {h['message']}" for h in warned]


def test_the_rules_revision_and_engine_name_who_answered() -> None:
    sglang = json.loads(kvdoctor("inspect", *INKLING, "--json").stdout)
    assert sglang["rules_revision"].startswith("sglang==") and sglang["engine"]["name"] == "kvdoctor"
    vllm = json.loads(kvdoctor("inspect", *VLLM_RUNS[0], "--json").stdout)
    assert vllm["rules_revision"].startswith("vllm==") and vllm["engine"]["name"] == "kvdoctor"
    beside = json.loads(kvdoctor("inspect", *VLLM_RUNS[-1], "--json").stdout)
    assert beside["engine"]["name"] == ("vllm" if beside["vllm"]["available"] else "kvdoctor")


# ---- the keys users parsed before the run header existed: same names, same values ---------------
def legacy_report(a: Analysis, request_tokens: int, concurrent: int) -> dict[str, Any]:
    """``inspect --json`` as kvdoctor printed it before its typed result (frozen here on purpose)."""
    cls = a.classification
    fc = forecast(a.sizing, a.spec, concurrent, request_tokens)
    spec = a.spec
    components = []
    for c in spec.components:
        per = "bytes_per_token" if c.index == PER_TOKEN else "bytes_per_request"
        components.append(
            {
                "name": c.name,
                "pool": a.layout.pool_of(c.sub_pool),
                "sub_pool": c.sub_pool,
                "index": c.index,
                "dtype": c.dtype,
                "layers": c.layers,
                "shape_per_layer": [list(s) for s in c.shapes],
                per: c.bytes,
            }
        )
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
            "layers": {
                "total": spec.num_layers,
                "full_attention": spec.full.layers if spec.full else 0,
                "sliding_window": spec.swa.layers if spec.swa else 0,
                "recurrent": spec.recurrent.layers if spec.recurrent else 0,
            },
            "sliding_window": spec.sliding_window,
            "tp_size": spec.tp_size,
        },
        "kv_cache_dtype": spec.kv_dtype.flag,
        "components": components,
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


@pytest.mark.parametrize("args", SGLANG_RULE_RUNS, ids=_ids(SGLANG_RULE_RUNS))
def test_every_key_existing_before_keeps_its_name_and_value(args: list[str]) -> None:
    printed = json.loads(kvdoctor("inspect", *args, "--json").stdout)
    flags = [a for a in args[1:] if a != "--strict"]
    before = json.loads(json.dumps(legacy_report(analyze(args[0], flags), 2048, 128)))
    assert set(before) <= set(printed)
    for key, value in before.items():
        assert printed[key] == value, key


def test_per_token_and_per_request_components_keep_their_one_size_key() -> None:
    printed = json.loads(kvdoctor("inspect", *INKLING, "--json").stdout)
    by_name = {c["name"]: c for c in printed["components"]}
    assert "bytes_per_token" in by_name["full_kv"] and "bytes_per_request" not in by_name["full_kv"]
    assert "bytes_per_request" in by_name["conv_state"] and "bytes_per_token" not in by_name["conv_state"]


# ---- --engine sglang's shapes (SGLang runs in .venv-sglang: tests/engines/sglang/test_sglang_inspect.py) --
def _answers(drift: tuple[FieldDrift, ...] = ()) -> SglangAnswers:
    return SglangAnswers(
        engine=EngineRef("sglang", "0.5.23", "/site-packages/sglang"),
        stubs=("platform: CUDA SM100 (Blackwell), through override_platform",),
        refusal=LiveRefusal("start-up", "unsupported (srt/server_args.py:1)"),
        fields={"refuses": True},
        skipped={},
        kvdoctor={"refuses": False, "kv_pool": "SWAKVPool"},
        kvdoctor_refusal=None,
        drift=drift,
    )


def _engine_document(body: Any, exit_code: int = 0) -> dict[str, Any]:
    head = header(
        "inspect",
        exit_code=exit_code,
        engine=EngineRef("sglang", "0.5.23", "/site-packages/sglang"),
        rules_revision=body.rules_revision,
    )
    return json.loads(json.dumps(document(head, body)))


def test_engine_sglang_document_keeps_engine_and_sglang_keys_and_validates() -> None:
    base = inspect_report(analyze("inkling-small", INKLING[1:]), 2048, 128)
    fields = {name: getattr(base, name) for name in base.__dataclass_fields__}
    doc = _engine_document(InspectBesideReport(**fields, sglang=_answers((FieldDrift("refuses", False, True),))))
    assert_valid(doc, "inspect")
    assert doc["engine"] == {"name": "sglang", "version": "0.5.23", "path": "/site-packages/sglang"}
    assert set(doc["sglang"]) == {
        "engine",
        "stubs",
        "refusal",
        "fields",
        "skipped",
        "kvdoctor",
        "kvdoctor_refusal",
        "drift",
        "rules_version",  # added (issue 20): the version the rules restate, and whether engine.version differs
        "differs_from_rules",
    }
    assert doc["sglang"]["drift"] == [{"field": "refuses", "kvdoctor": False, "sglang": True}]
    assert doc["sglang"]["refusal"] == {"stage": "start-up", "message": "unsupported (srt/server_args.py:1)"}


def test_the_refusal_only_engine_shape_validates() -> None:
    from kvdoctor.core.registry import Hazard

    body = RefusedInspectReport(
        model=ModelSource("weird-model"),
        hazards=(Hazard("error", "KVD015-RULES-DRIFT", "refuses: kvdoctor says True, SGLang 0.5.23 says False"),),
        sglang=_answers(),
    )
    doc = _engine_document(body)
    assert_valid(doc, "inspect")
    assert doc["model"] == {"source": "weird-model"} and doc["rules_revision"] is None


# ---- the schema has teeth ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real() -> dict[str, Any]:
    return json.loads(kvdoctor("inspect", *HOST_POOL, "--json").stdout)


@pytest.mark.parametrize(
    "key", ["components", "retraction_backup", "hazards", "rules_revision", "uses_ssm_state", "verdict", "engine"]
)
def test_a_document_missing_a_required_key_fails_validation(real: dict[str, Any], key: str) -> None:
    assert not errors(real, "inspect")
    broken = {k: v for k, v in real.items() if k != key}
    assert errors(broken, "inspect")


@pytest.mark.parametrize(("verdict", "exit_code"), [("pass", 1), ("warn", 1), ("fail", 0), ("error", 0)])
def test_a_verdict_disagreeing_with_the_exit_code_fails_validation(
    real: dict[str, Any], verdict: str, exit_code: int
) -> None:
    assert errors({**real, "verdict": verdict, "exit_code": exit_code}, "inspect")


def test_a_wrongly_typed_or_nulled_value_fails_validation(real: dict[str, Any]) -> None:
    assert errors({**real, "uses_ssm_state": "yes"}, "inspect")
    assert errors({**real, "kv_pool": None}, "inspect")
    component = {k: v for k, v in real["components"][0].items() if not k.startswith("bytes_")}
    assert errors({**real, "components": [component]}, "inspect")  # a component with no size at all
