"""`kvdoctor roundtrip` and `kvdoctor bench roundtrip` end to end: tables, JSON, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from kvdoctor.cli.app import app

INKLING = ["inkling-small", "--kv-cache-dtype", "mxfp8", "--disaggregation-mode", "decode"]
SMALL = ["--device", "cpu", "--requests", "4", "--tokens", "48", "--layers", "1", "--heads", "1"]
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def test_readme_main_job_command_passes_and_prints_its_table_readable_at_80_columns() -> None:
    """The default run, piped at 80 columns without colour: every name whole, nothing cut, a verdict last."""
    env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "kvdoctor", "roundtrip", *INKLING, "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    for name in ("full_kv_scales", "swa_kv_scales", "conv_state", "padding_slot", "resident_requests"):
        assert name in out.stdout
    assert "Round trip OK" in out.stdout
    assert "8 requests (4 retracted) up to 256 tokens" in out.stdout
    lines = out.stdout.splitlines()
    assert "…" not in out.stdout and "\x1b" not in out.stdout
    assert max(len(line) for line in lines) <= 80
    for name in ("full_kv", "full_kv_scales", "swa_kv_scales", "conv_state", "resident_requests", "slot_reuse"):
        assert any(line.startswith(f"│ {name} ") for line in lines), name  # a table row, its name whole
    assert lines[-1].startswith("verdict: passed — 9 components equal")
    assert sum(line.startswith("verdict:") for line in lines) == 1


def test_json_has_the_promised_keys() -> None:
    out = invoke("roundtrip", *INKLING, *SMALL, "--json")
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert {"ok", "device", "kv_cache_dtype", "injected", "components", "inject_matched", "hazards"} <= set(report)
    assert report["ok"] is True and report["device"] == "cpu" and report["kv_cache_dtype"] == "mxfp8"
    assert report["injected"] is None
    for comp in report["components"]:
        assert {"name", "bytes", "mismatched_bytes", "equal", "copies_out", "copies_in"} <= set(comp)
        assert isinstance(comp["bytes"], int) and isinstance(comp["equal"], bool)


def test_injected_fault_exits_one_and_names_the_component() -> None:
    out = invoke("roundtrip", *INKLING, *SMALL, "--inject", "drop-block-scale")
    assert out.exit_code == 1
    assert "verdict: FAILED — differs: full_kv_scales, swa_kv_scales" in " ".join(out.stdout.split())
    report = json.loads(invoke("roundtrip", *INKLING, *SMALL, "--inject", "missing-mamba", "--json").stdout)
    assert report["ok"] is False and report["injected"] == "missing-mamba"
    assert report["failing"] == ["conv_state"]
    assert report["inject_matched"] is True and report["expected_red"] == ["conv_state"]


def test_fault_that_breaks_something_else_is_called_out(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from kvdoctor.state.faults import FAULTS

    monkeypatch.setitem(FAULTS, "drop-swa", dataclasses.replace(FAULTS["drop-swa"], targets=("full_kv",)))
    out = invoke("roundtrip", *INKLING, *SMALL, "--page-size", "128", "--inject", "drop-swa")
    assert out.exit_code == 1
    text = " ".join(out.stdout.split())
    assert "injected fault mismatch" in text
    assert "but also broke swa_kv, swa_kv_scales" in text and "left full_kv green" in text
    report = json.loads(
        invoke("roundtrip", *INKLING, *SMALL, "--page-size", "128", "--inject", "drop-swa", "--json").stdout
    )
    assert report["inject_matched"] is False


def test_launch_line_errors_are_shown_beside_the_round_trip() -> None:
    # INKLING on triton runs MXFP8 at page 1 (its own default, fa4, takes page 128 on SM100): SGLang refuses
    # that (KVD006), the pool's copy still round-trips.
    triton = ("--attention-backend", "triton")
    out = invoke("roundtrip", *INKLING, *triton, *SMALL)
    assert out.exit_code == 0, out.output
    assert "KVD006" in out.stdout and "Not gated: a hazard of this launch line" in " ".join(out.stdout.split())
    report = json.loads(invoke("roundtrip", *INKLING, *triton, *SMALL, "--json").stdout)
    assert [h["code"][:6] for h in report["hazards"]] == ["KVD006"]
    assert {"severity", "code", "message"} <= set(report["hazards"][0])
    clean = json.loads(invoke("roundtrip", *INKLING, *SMALL, "--page-size", "128", "--json").stdout)
    assert clean["hazards"] == [] and clean["inject_matched"] is None


@pytest.mark.parametrize(
    "args",
    [
        ["roundtrip", "inkling-small", "--kv-cache-dtype", "nvfp4", *SMALL],
        ["roundtrip", *INKLING, *SMALL, "--inject", "no-such-fault"],
        ["roundtrip", "llama-3.1-8b", *SMALL, "--inject", "drop-swa"],
        ["roundtrip", "no-such-model", *SMALL],
        ["roundtrip", *INKLING, "--device", "tpu"],
    ],
)
def test_bad_input_exits_two(args: list[str]) -> None:
    out = invoke(*args)
    assert out.exit_code == 2, out.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal when CUDA is absent")
def test_cuda_requested_without_cuda_exits_two() -> None:
    out = invoke("roundtrip", *INKLING, "--device", "cuda")
    assert out.exit_code == 2
    assert "CUDA" in out.output


# Inkling MXFP8 decode at page 1 (triton): the setup the bench used before the rule model knew the GPU.
BENCH_PAGE_1 = [
    "inkling-small",
    "--device",
    "cpu",
    "--requests",
    "3",
    "--tokens",
    "64",
    "--layers",
    "1",
    "--repeats",
    "1",
    "--",
    "--kv-cache-dtype",
    "mxfp8",
    "--disaggregation-mode",
    "decode",
    "--attention-backend",
    "triton",
]


def test_bench_roundtrip_prints_both_paths_and_ratios() -> None:
    out = invoke("bench", "roundtrip", *BENCH_PAGE_1)
    assert out.exit_code == 0, out.output
    assert "ours" in out.stdout and "naive" in out.stdout and "identical" in out.stdout
    report = json.loads(invoke("bench", "roundtrip", *BENCH_PAGE_1[:-7], "--json", *BENCH_PAGE_1[-7:]).stdout)
    assert report["bytes_match"] is True
    paths = {(r["path"], r["direction"]) for r in report["rows"]}
    assert {("ours", "offload"), ("naive", "offload"), ("ours", "restore"), ("naive", "restore")} <= paths
    assert report["offload_speedup"] > 0 and report["restore_speedup"] > 0


def test_bench_roundtrip_default_setup_backs_up_identical_bytes() -> None:
    """The default setup runs FA4 at page 128: the naive copy must read page-interleaved scale units
    as (unit, bytes) rows, as ``MHATokenToKVPoolMXFP8._read_scales`` gathers them (it read single bytes)."""
    out = invoke(
        "bench",
        "roundtrip",
        "--device",
        "cpu",
        "--requests",
        "3",
        "--tokens",
        "64",
        "--layers",
        "1",
        "--repeats",
        "1",
        "--json",
    )
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert report["bytes_match"] is True and report["used"]["page_size"] == 128


def test_help_lists_every_fault() -> None:
    from kvdoctor.state.faults import FAULTS

    out = invoke("roundtrip", "--help")
    assert out.exit_code == 0
    text = " ".join(out.stdout.split())
    for fault in FAULTS:
        assert fault in text
