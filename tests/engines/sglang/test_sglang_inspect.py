"""``inspect --engine sglang`` and ``kvdoctor drift``: SGLang's live answers beside kvdoctor's rules."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.sglang

INKLING = [
    "inkling-small",
    "--kv-cache-dtype",
    "mxfp8",
    "--disaggregation-mode",
    "decode",
    "--page-size",
    "128",
    "--max-total-tokens",
    "65536",
]


def kvdoctor(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "TRITON_INTERPRET": "1"}
    return subprocess.run(
        [sys.executable, "-m", "kvdoctor", *args], capture_output=True, text=True, timeout=900, check=False, env=env
    )


def test_live_answers_come_from_sglangs_own_objects() -> None:
    from kvdoctor.engines import GpuArch
    from kvdoctor.engines.sglang.inspect import ask

    live = ask("inkling-small", INKLING[1:], GpuArch.SM100, 65536)
    assert live.refusal is None
    fields = live.fields
    assert fields["kv_pool"][0] == "SWAKVPool" and fields["uses_ssm_state"] is True
    assert fields["cpu_copy_carries_mamba"] is False
    assert fields["pd_state_types"] == ["SWA", "BLOCK_SCALE", "BLOCK_SCALE_SWA", "MAMBA"]
    assert fields["retraction_backup"] == "cpu_tensor"
    assert fields["full_kv.layers"] + fields["swa_kv.layers"] == 16
    assert any("override_platform" in stub for stub in live.stubs)


def test_host_pool_on_recurrent_state_is_sglangs_own_refusal_with_file_and_line() -> None:
    from kvdoctor.engines import GpuArch
    from kvdoctor.engines.sglang.inspect import ask

    argv = ["--disaggregation-mode", "decode", "--disaggregation-decode-retraction-backup", "host_pool"]
    live = ask("qwen3-next-80b-a3b", argv, GpuArch.SM100, None)
    assert live.refusal is not None and live.refusal.stage == "tree cache"
    assert "Host-pool retraction does not support Mamba models" in live.refusal.message
    assert "mem_cache/registry.py:" in live.refusal.message


def test_a_wrong_rule_is_reported_as_drift() -> None:
    """Teeth: change one of kvdoctor's answers and the comparison must name that field."""
    from kvdoctor.core.sglang.analysis import analyze
    from kvdoctor.engines import GpuArch
    from kvdoctor.engines.sglang.inspect import ask, compare, rule_answers

    analysis = analyze("inkling-small", INKLING[1:])
    ours = rule_answers(analysis, None)
    live = ask("inkling-small", INKLING[1:], GpuArch.SM100, 65536)
    baseline = {d.field for d in compare(ours, live)}
    ours["cpu_copy_carries_mamba"] = not ours["cpu_copy_carries_mamba"]
    ours["pd_state_types"] = ours["pd_state_types"][:-1]
    assert {d.field for d in compare(ours, live)} - baseline == {"cpu_copy_carries_mamba", "pd_state_types"}


def test_inspect_engine_sglang_json_carries_engine_and_comparison() -> None:
    out = kvdoctor("inspect", *INKLING, "--engine", "sglang", "--json")
    assert out.returncode == 0, out.stderr
    from tests.schema_check import assert_valid

    report = assert_valid(out.stdout, "inspect")  # the published schema holds for SGLang's real answers
    assert report["engine"]["name"] == "sglang" and report["engine"] == report["sglang"]["engine"]
    assert set(report["sglang"]) >= {"fields", "kvdoctor", "drift", "stubs", "refusal"}
    drift_hazards = [h for h in report["hazards"] if h["code"] == "KVD015-RULES-DRIFT"]
    assert len(drift_hazards) == len(report["sglang"]["drift"])
    assert report["verdict"] in ("pass", "warn") and report["exit_code"] == 0


def test_inspect_engine_sglang_table_names_the_stubs() -> None:
    out = kvdoctor("inspect", *INKLING, "--engine", "sglang")
    assert out.returncode == 0, out.stderr
    assert "kvdoctor beside SGLang" in out.stdout and "stub: platform" in out.stdout
    lines = out.stdout.rstrip("\n").splitlines()
    assert [line for line in lines if line.startswith("verdict:")] == [lines[-1]]  # one verdict line, last
    assert "drift from sglang" in lines[-1]


def test_drift_command_runs_a_slice_of_the_matrix() -> None:
    out = kvdoctor("drift", "--fixture", "llama-3.1-8b", "--case", "colocated", "--case", "decode", "--json")
    assert out.returncode in (0, 1), out.stderr
    report = json.loads(out.stdout)
    assert report["cases"] == 2 and report["fields_compared"] > 20
    assert report["ok"] == (out.returncode == 0)


def test_drift_refuses_unknown_fixture_and_case() -> None:
    out = kvdoctor("drift", "--fixture", "no-such-model")
    assert out.returncode == 2 and "unknown fixture" in out.stderr
    out = kvdoctor("drift", "--case", "no-such-case")
    assert out.returncode == 2 and "unknown case" in out.stderr


def test_the_comparison_table_is_never_cropped_at_80_columns() -> None:
    """Long class names and refusals made rich crop the beside-SGLang table at 80 columns (no right
    border, `kvdoctor has n`); the layout is now chosen by measuring the table."""
    env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1", "TRITON_INTERPRET": "1"}
    args = [*INKLING, "--disaggregation-decode-retraction-backup", "host_pool", "--engine", "sglang"]
    out = subprocess.run(
        [sys.executable, "-m", "kvdoctor", "inspect", *args], capture_output=True, text=True, timeout=900, env=env
    )
    assert out.returncode == 0, out.stderr
    section = out.stdout.split("kvdoctor beside SGLang")[1].split("SGLang beside kvdoctor")[0]
    for line in section.splitlines():
        text = line.rstrip()
        assert len(line) <= 80, line
        if text[:1] in "│┌└├":
            assert text[-1] in "│┐┘┤", line  # the table's right edge is there: nothing cropped
    assert "…" not in out.stdout
