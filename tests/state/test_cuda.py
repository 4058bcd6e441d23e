"""The same protocol on CUDA: pinned host arena, side-stream copies, Triton MXFP8 fills.

These need a GPU (they exercise streams and pinned memory, which CPU tensors do not have);
``scripts/gpu-check.sh`` runs them on the device.
"""

from __future__ import annotations

import pytest
import torch

from kvdoctor.bench.roundtrip import BenchOptions, bench_roundtrip
from kvdoctor.roundtrip.options import Reductions, RoundtripOptions
from kvdoctor.state.faults import FAULTS
from kvdoctor.state.run import run_roundtrip
from tests.state.helpers import analysis

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

INKLING = ("inkling-small", "mxfp8", "--page-size", "128")


def _cuda(*model: str, inject: str | None = None, tokens: int = 300, chunk: int = 8192):
    opts = RoundtripOptions(
        device="cuda", requests=6, tokens=tokens, inject=inject, chunk=chunk, reductions=Reductions(layers=2)
    )
    return run_roundtrip(analysis(*model), opts)


MODELS = [
    INKLING,
    ("inkling-small", "mxfp8"),
    ("qwen3-next-80b-a3b", "bf16"),
    ("gpt-oss-20b", "mxfp8", "--page-size", "128"),
    ("deepseek-v3", "fp8_e4m3"),
]


@pytest.mark.parametrize("model", MODELS)
def test_round_trip_on_cuda_is_bit_exact(model: tuple[str, ...]) -> None:
    result = _cuda(*model)
    assert result.device.startswith("cuda")
    assert result.ok, result.failing


def test_small_chunks_on_cuda() -> None:
    assert _cuda(*INKLING, chunk=7).ok


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_faults_on_cuda(fault: str) -> None:
    result = _cuda(*INKLING, inject=fault)
    assert not result.ok
    assert result.failing == result.expected_red


def test_bench_on_cuda_reports_pinned_bandwidth() -> None:
    opts = BenchOptions(device="cuda", requests=8, tokens=512, repeats=2)
    result = bench_roundtrip(analysis(*INKLING), opts)
    assert result.bytes_match
    assert {r.path for r in result.rows} == {"ours", "naive", "pinned-memcpy"}
    assert all(r.vs_pinned is not None for r in result.rows if r.path == "ours")
