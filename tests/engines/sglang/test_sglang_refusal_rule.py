"""One engine-refusal rule for ``inspect --engine sglang`` (issue 16, item 2).

A launch the installed SGLang refuses is exit 2 (when kvdoctor's rules refuse the input too: malformed) or
an error hazard KVD014 carrying SGLang's own message, never ``verdict: passed``. It used to be: on a
Qwen3-Next config without ``full_attention_interval`` both sides refused, "agreed", and the run passed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvdoctor.core.config import load_config
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.core.sglang.inspect_result import LiveRefusal
from kvdoctor.engines.sglang.inspect import Beside, LiveAnswers, compare

INFO = EngineRef("sglang", "0.5.23", "/site-packages/sglang")


def _beside(ours_refuses: bool, live_refusal: LiveRefusal | None, kvdoctor_refusal: str | None = None) -> Beside:
    ours = {"refuses": ours_refuses, "kv_pool": "MHATokenToKVPool"}
    fields = {"refuses": live_refusal is not None, "kv_pool": ["MHATokenToKVPool"]}
    live = LiveAnswers(INFO, [], refusal=live_refusal, fields=fields)
    return Beside(ours, live, compare(ours, live), kvdoctor_refusal)


def test_a_live_refusal_the_rules_did_not_report_is_a_kvd014_error() -> None:
    beside = _beside(False, LiveRefusal("pools", "SGLang cannot build the pools for this launch: boom (x.py:1)"))
    codes = [(h.severity, h.code) for h in beside.hazards()]
    assert ("error", "KVD014-SGLANG-REFUSES") in codes and ("error", "KVD015-RULES-DRIFT") in codes
    refused = next(h for h in beside.hazards() if h.code == "KVD014-SGLANG-REFUSES")
    assert "installed SGLang 0.5.23 refuses this launch (pools)" in refused.message and "x.py:1" in refused.message


def test_a_refusal_both_sides_report_is_not_doubled() -> None:
    assert _beside(True, LiveRefusal("tree cache", "no")).hazards() == []  # the rule model's own KVD014 carries it


def test_no_refusal_no_hazard() -> None:
    assert _beside(False, None).hazards() == []


def test_both_refusing_the_input_is_exit_2_material() -> None:
    both = _beside(True, LiveRefusal("pools", "no attribute 'full_attention_interval'"), kvdoctor_refusal="cfg: bad")
    assert both.refused_by_both() == "SGLang 0.5.23 refuses it too (pools): no attribute 'full_attention_interval'"
    assert _beside(True, None, kvdoctor_refusal="cfg: bad").refused_by_both() is None


@pytest.mark.sglang
def test_a_config_kvdoctor_and_sglang_both_refuse_exits_2_with_both_refusals(tmp_path: Path) -> None:
    top = dict(load_config("qwen3-next-80b-a3b").top)
    del top["full_attention_interval"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(top), encoding="utf-8")
    env = {**os.environ, "COLUMNS": "200", "TRITON_INTERPRET": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "kvdoctor", "inspect", str(path), "--engine", "sglang"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env=env,
    )
    assert out.returncode == 2, out.stdout
    assert "verdict: passed" not in out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"kvdoctor: error: {path}: field 'full_attention_interval'")
    assert "SGLang 0.5.23 refuses it too (pools)" in lines[0] and "qwen3_next.py" in lines[0]
