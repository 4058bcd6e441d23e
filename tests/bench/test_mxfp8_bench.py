"""`kvdoctor bench mxfp8` runs end to end (tiny sizes: performance itself is not asserted)."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from kvdoctor._exceptions import InputError
from kvdoctor.bench.mxfp8 import parse_size
from kvdoctor.bench.timing import time_call
from kvdoctor.cli.app import app

runner = CliRunner()


def test_json_lists_every_backend_and_the_plain_casts() -> None:
    result = runner.invoke(app, ["bench", "mxfp8", "--size", "256KiB", "--repeats", "2", "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    pairs = {(r["op"], r["backend"]) for r in data["rows"]}
    assert {
        ("quantize", "cast"),
        ("quantize", "torch"),
        ("quantize", "triton"),
        ("dequantize", "cast"),
        ("dequantize", "torch"),
        ("dequantize", "triton"),
        ("copy", "memcpy"),
    } <= pairs
    quant = [r for r in data["rows"] if r["op"] == "quantize" and r["backend"] != "cast"]
    assert all(r["bytes_match"] for r in quant)
    torch_row = next(r for r in quant if r["backend"] == "torch")
    assert torch_row["bytes_moved"] == torch_row["elements"] * 3 + torch_row["elements"] // 32


def test_table_renders() -> None:
    result = runner.invoke(
        app,
        [
            "bench",
            "mxfp8",
            "--size",
            "64KiB",
            "--repeats",
            "1",
            "--device",
            "cpu",
            "--backend",
            "torch",
            "--scale-mode",
            "floor",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "MXFP8 codec on cpu" in result.output and "x cast" in result.output


def test_bad_option_is_one_line_exit_2() -> None:
    result = runner.invoke(app, ["bench", "mxfp8", "--scale-mode", "ceil", "--device", "cpu"])
    assert result.exit_code == 2
    assert "scale-mode" in result.output


def test_parse_size() -> None:
    assert parse_size("1GiB") == 2**30
    assert parse_size("64 MiB") == 64 * 2**20
    assert parse_size("1000") == 1000
    with pytest.raises(InputError):
        parse_size("lots")


def test_time_call_counts_samples_after_warmup() -> None:
    calls: list[int] = []
    timing = time_call(lambda: calls.append(1), device=torch.device("cpu"), repeats=3, warmup=2)
    assert len(calls) == 5 and timing.samples == 3 and timing.min_s <= timing.median_s


def test_table_at_80_columns_cuts_nothing_and_ends_with_the_verdict() -> None:
    args = ["bench", "mxfp8", "--size", "64KiB", "--repeats", "1", "--device", "cpu", "--backend", "torch"]
    result = runner.invoke(app, args, env={"COLUMNS": "80", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "…" not in result.output and max(len(line) for line in lines) <= 80
    assert "= ref" in result.output and "x cast" in result.output  # every header whole
    assert lines[-1] == "verdict: passed — every codec's bytes equal the reference"


def test_peak_gbps_help_says_what_happens_without_it() -> None:
    result = runner.invoke(app, ["bench", "mxfp8", "--help"], env={"COLUMNS": "200"})
    assert "[default: 0]" not in result.output and "spec-table figure" in result.output
