"""`kvdoctor roundtrip MODEL --server vllm --engine vllm` end to end: vLLM 0.33's own CPUOffloadingWorker, through
the CLI, green byte-exact per group, red under each fault with exactly its rows, a fault that cannot apply exit 2,
and the one result's JSON (schema-valid), JUnit and step summary agreeing row for row.

Runs in .venv-vllm/: each test is one ``.venv-vllm/bin/kvdoctor`` process (~45 s of it importing vLLM), so CI
(``make test-vllm``) runs three (Llama clean with its reporters, Llama drop-group as a table, per-token-head FP8
Llama under skip-scales);
``make vllm-matrix`` runs the rest (tests/engines/vllm/test_vllm_roundtrip.py drives every fault in one process).
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from kvdoctor.engines.vllm import _offload_shims as shims
from tests.schema_check import assert_valid

pytestmark = pytest.mark.vllm

KVDOCTOR = str(Path(sys.executable).parent / "kvdoctor")  # the .venv-vllm console script
LLAMA = ["llama-3.1-8b", "--server", "vllm", "--engine", "vllm"]
HYBRID = ["nemotron-h-8b", "--server", "vllm", "--engine", "vllm", "--layers", "2"]  # 8 groups, 2 layers each
LLAMA_ROWS = ["g0.k", "g0.v", "g0.ledger"]


def kvdoctor(*args: str, summary: Path | None = None, columns: int = 200) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    env.update(COLUMNS=str(columns), NO_COLOR="1", VLLM_TARGET_DEVICE="cpu")
    if summary is not None:
        env["GITHUB_STEP_SUMMARY"] = str(summary)
    return subprocess.run([KVDOCTOR, "roundtrip", *args], capture_output=True, text=True, timeout=600, env=env)


def report(*args: str) -> tuple[int, dict[str, Any]]:
    out = kvdoctor(*args, "--json")
    assert out.stdout, out.stderr
    return out.returncode, assert_valid(out.stdout, "roundtrip")


def test_clean_llama_is_byte_exact_and_json_junit_and_summary_agree(tmp_path: Path) -> None:
    junit, summary = tmp_path / "rt.xml", tmp_path / "summary.md"
    out = kvdoctor(*LLAMA, "--json", "--junit", str(junit), summary=summary)
    assert out.returncode == 0, out.stderr
    doc = assert_valid(out.stdout, "roundtrip")
    assert (doc["ok"], doc["failing"], doc["injected"], doc["inject_matched"]) == (True, [], None, None)
    assert doc["engine"]["name"] == "vllm" and doc["backend"] == "CPUOffloadingWorker"
    assert [c["name"] for c in doc["components"]] == LLAMA_ROWS
    for row in doc["components"]:  # every byte compared equal, moved out once and in once
        assert row["ok"] and row["mismatched_bytes"] == 0 and row["bytes"] > 0
        assert row["bytes_out"] == row["bytes_in"] == row["bytes"] and (row["copies_out"], row["copies_in"]) == (1, 1)
    used = doc["used"]
    assert used["engine"] == "vllm" and used["layers_per_group"] is None and used["tokens"] == 256
    assert [s["name"] for s in used["shims"]] == list(shims.NAMES)
    (group,) = used["groups"]
    assert (group["spec"], group["layers"], len(group["block_ids"])) == ("FullAttentionSpec", 32, 256 // 16)
    assert not set(group["block_ids"]) & set(group["new_block_ids"])  # loaded into fresh blocks
    assert group["bytes_out"] == group["bytes_in"] == group["expected_bytes"] == 16 * 32 * group["page_bytes"]
    cases = {c.get("name"): c.find("failure") is not None for c in ET.parse(junit).getroot().iter("testcase")}
    assert cases == dict.fromkeys(LLAMA_ROWS, False)
    text = summary.read_text()
    assert all(f"| {name} |" in text for name in LLAMA_ROWS), text


@pytest.mark.matrix
def test_hybrid_nemotron_h_is_byte_exact_per_group_and_component() -> None:
    code, doc = report(*HYBRID)
    assert code == 0 and doc["ok"], doc["failing"]
    specs = {g["group"]: g["spec"] for g in doc["used"]["groups"]}
    assert set(specs.values()) == {"MambaSpec", "FullAttentionSpec"}
    assert all(g["layers"] <= 2 for g in doc["used"]["groups"]) and doc["used"]["layers_per_group"] == 2
    names = {c["name"] for c in doc["components"]}
    for gi, spec in specs.items():
        parts = {"conv_state", "ssm_state"} if spec == "MambaSpec" else {"k", "v"}
        assert {f"g{gi}.{p}" for p in parts} | {f"g{gi}.ledger"} <= names


@pytest.mark.parametrize(
    ("args", "fault", "red"),
    [
        pytest.param(LLAMA, "drop-group", set(LLAMA_ROWS), marks=pytest.mark.matrix),
        pytest.param(  # every byte moved (the ledger is green), into swapped blocks
            LLAMA, "reorder-blocks", {"g0.k", "g0.v"}, marks=pytest.mark.matrix
        ),
        pytest.param(  # the last group: nemotron-h's attention layers
            HYBRID, "drop-group", {"g7.k", "g7.v", "g7.ledger"}, marks=pytest.mark.matrix
        ),
    ],
)
def test_each_fault_turns_exactly_its_rows_red(args: list[str], fault: str, red: set[str]) -> None:
    code, doc = report(*args, "--inject", fault)
    assert code == 1 and doc["ok"] is False
    assert set(doc["failing"]) == set(doc["expected_red"]) == red and doc["inject_matched"] is True
    rows = {c["name"]: c for c in doc["components"]}
    assert all(rows[n]["ok"] for n in set(rows) - red)
    if fault == "drop-group":
        assert all(rows[n]["bytes_out"] == 0 and not rows[n]["ledger_ok"] for n in red)
    else:
        assert all(r["ledger_ok"] for r in rows.values())
        swapped = doc["used"]["groups"][0]["new_block_ids"][:2]
        assert rows["g0.k"]["first_slot"] in swapped and rows["g0.k"]["mismatched_bytes"] > 0


def test_skip_scales_on_per_token_head_fp8_turns_exactly_the_scale_rows_red() -> None:
    """vLLM's per-token-head FP8 keeps an fp32 scale per (token, head) and side inside each page (the vllm#48412
    class): the store wrapped to copy only each cell's data leaves k and v byte-exact and the scales red."""
    code, doc = report(*LLAMA, "--kv-cache-dtype", "fp8_per_token_head", "--inject", "skip-scales")
    red = {"g0.k_scale", "g0.v_scale", "g0.ledger"}
    assert code == 1 and doc["kv_cache_dtype"] == "fp8_per_token_head"
    assert set(doc["failing"]) == set(doc["expected_red"]) == red and doc["inject_matched"] is True
    rows = {c["name"]: c for c in doc["components"]}
    assert list(rows) == ["g0.k", "g0.k_scale", "g0.v", "g0.v_scale", "g0.ledger"]
    for side in ("g0.k", "g0.v"):
        assert rows[side]["ok"] and rows[side]["bytes_out"] == rows[side]["bytes_in"] == rows[side]["bytes"]
        scale = rows[f"{side}_scale"]
        assert (scale["bytes"], scale["bytes_out"], scale["bytes_in"]) == (32 * 16 * 8 * 16 * 4, 0, scale["bytes"])
    (group,) = doc["used"]["groups"]
    assert group["page_bytes"] == 16 * 8 * (2 * 128 + 8)
    assert group["bytes_out"] == group["expected_bytes"] - 2 * rows["g0.k_scale"]["bytes"]


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        (  # vLLM 0.33's plain fp8 is per-tensor: no group keeps scales in its pages
            ["--inject", "skip-scales"],
            "--inject skip-scales: no group of this launch line carries in-page scales "
            "(try --kv-cache-dtype fp8_per_token_head, int8_per_token_head or int4_per_token_head)",
        ),
        (  # 16 tokens are one block: there are no two blocks to swap
            ["--inject", "reorder-blocks", "--tokens", "16"],
            "--inject reorder-blocks needs a group that moves at least two blocks (raise --tokens)",
        ),
    ],
)
@pytest.mark.matrix
def test_a_fault_that_cannot_apply_is_exit_2_never_a_pass(extra: list[str], line: str) -> None:
    out = kvdoctor(*LLAMA, *extra, "--json")
    assert (out.returncode, out.stdout) == (2, ""), out.stdout
    assert out.stderr.strip() == f"kvdoctor: error: {line}"


def test_the_table_names_each_shim_in_the_header_and_why_each_row_is_red() -> None:
    out = kvdoctor(*LLAMA, "--inject", "drop-group")
    assert out.returncode == 1, out.stderr
    head = out.stdout.split("Round trip")[0]
    for shim in shims.SHIMS:
        assert f"shim      {shim.name}: " in head
    assert "backup    CPUOffloadingWorker" in head and "engine    vllm 0.33.0" in head
    assert (  # the store skipped the group; the load still wrote the (stale) host slots back
        "g0.ledger: vLLM's descriptors moved 0 bytes out and 33,554,432 in; the group holds 33,554,432 "
        "(16 blocks x 32 layers x 65,536 bytes)"
    ) in out.stdout
    assert out.stdout.rstrip().endswith(
        "verdict: FAILED — differs: g0.k, g0.v, g0.ledger (--inject drop-group caught where expected)"
    )
