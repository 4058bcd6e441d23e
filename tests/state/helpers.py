"""Small shared helpers for the roundtrip tests: analyse a fixture and run one small round trip."""

from __future__ import annotations

from kvdoctor.core.sglang.analysis import Analysis, analyze
from kvdoctor.roundtrip.options import Reductions, RoundtripOptions
from kvdoctor.roundtrip.result import ComponentCheck, RoundtripResult
from kvdoctor.state.run import run_roundtrip

DECODE = ("--disaggregation-mode", "decode")


def analysis(model: str, dtype: str = "auto", *flags: str) -> Analysis:
    return analyze(model, ["--kv-cache-dtype", dtype, *DECODE, *flags])


def roundtrip(
    model: str,
    dtype: str = "auto",
    *flags: str,
    inject: str | None = None,
    requests: int = 4,
    tokens: int = 48,
    layers: int = 1,
    heads: int = 1,
    chunk: int | None = None,
    seed: int = 0,
) -> RoundtripResult:
    """A small, fully reduced round trip on CPU."""
    opts = RoundtripOptions(
        device="cpu",
        requests=requests,
        tokens=tokens,
        seed=seed,
        inject=inject,
        reductions=Reductions(layers=layers, heads=heads),
    )
    if chunk is not None:
        opts = RoundtripOptions(**{**opts.__dict__, "chunk": chunk})
    return run_roundtrip(analysis(model, dtype, *flags), opts)


def row(result: RoundtripResult, name: str) -> ComponentCheck:
    return result.row(name)
