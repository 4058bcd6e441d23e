"""The round trip's memory estimate (``state/budget.py``): never below what a run really takes, and
the refusal names the estimate and the largest --requests that fits."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from kvdoctor._exceptions import InputError
from kvdoctor.core.sglang.analysis import analyze
from kvdoctor.roundtrip.options import Reductions
from kvdoctor.state import budget
from kvdoctor.state.pools import plan_sizes, reduced_geometry

MEASURE = textwrap.dedent("""
    import json, resource, sys
    import psutil
    from kvdoctor.core.sglang.analysis import analyze
    from kvdoctor.roundtrip.options import Reductions, RoundtripOptions
    from kvdoctor.state import run as run_mod
    model, requests, tokens, layers, flags = json.loads(sys.argv[1])
    seen = {}
    check = run_mod.check_budget

    def spy(*args, **kwargs):
        seen["estimate"] = check(*args, **kwargs)
        seen["rss"] = psutil.Process().memory_info().rss
        return seen["estimate"]

    run_mod.check_budget = spy
    options = RoundtripOptions(device="cpu", requests=requests, tokens=tokens,
                                       reductions=Reductions(layers=layers))
    assert run_mod.run_roundtrip(analyze(model, flags), options).ok
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"estimate": seen["estimate"].total, "measured": peak - seen["rss"]}))
""")


@pytest.mark.parametrize(
    ("model", "requests", "tokens", "layers", "flags"),
    [
        # triton keeps Inkling at page 1 (its own default, fa4, takes page 128 on SM100).
        ("inkling-small", 6, 256, None, ["--attention-backend", "triton"]),
        ("llama-3.1-8b", 8, 512, 4, []),
        (
            "inkling-small",
            4,
            512,
            None,
            ["--kv-cache-dtype", "mxfp8", "--disaggregation-mode", "decode", "--page-size", "128"],
        ),
    ],
)
def test_the_estimate_covers_the_measured_peak_without_crying_wolf(
    model: str, requests: int, tokens: int, layers: int | None, flags: list[str]
) -> None:
    if torch.cuda.is_available():
        pytest.skip("measures host RSS of a CPU run")
    args = json.dumps([model, requests, tokens, layers, flags])
    out = subprocess.run([sys.executable, "-c", MEASURE, args], capture_output=True, text=True, timeout=300, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["measured"] <= seen["estimate"] <= 2 * seen["measured"], seen


def _setup(requests: int, tokens: int = 256, *flags: str):
    analysis = analyze("inkling-small", ["--attention-backend", "triton", *flags])  # page 1 (fa4 would take 128)
    geo = reduced_geometry(analysis, Reductions())
    sizing = plan_sizes(requests, budget.retracted_for(requests, 0.5), tokens, analysis.flags.page_size, geo.window)
    return analysis, geo, sizing


def test_the_largest_fitting_request_count_is_exact_for_the_room_given() -> None:
    analysis, geo, sizing = _setup(1000)
    room = budget.Capacity(device=None, host=3 * 2**30)
    best = budget.largest_fitting(analysis, geo, sizing, 0.5, room)

    def total(requests: int) -> int:
        trial = plan_sizes(requests, budget.retracted_for(requests, 0.5), 256, 1, geo.window)
        return budget.estimate(analysis, geo, trial).total

    assert 2 < best < 1000
    assert total(best) <= room.host < total(best + 1)


def test_refusal_names_the_estimate_and_what_fits() -> None:
    analysis, geo, sizing = _setup(100_000)
    with pytest.raises(InputError) as refused:
        budget.check_budget(
            analysis, geo, sizing, torch.device("cpu"), fraction=0.5, room=budget.Capacity(device=None, host=8 * 2**30)
        )
    message = str(refused.value)
    assert "GiB of host memory, 8.00 GiB available (100000 requests of up to 256 tokens)" in message
    assert "the largest --requests that fits is" in message


def test_on_a_gpu_device_and_host_memory_are_budgeted_apart() -> None:
    analysis, geo, sizing = _setup(64)
    est = budget.estimate(analysis, geo, sizing)
    assert est.device_bytes == est.pools + est.fill and est.total == est.device_bytes + est.host_bytes
    tight_device = budget.Capacity(device=est.device_bytes - 1, host=est.total * 10)
    assert not budget.fits(est, tight_device)
    assert budget.fits(est, budget.Capacity(device=est.device_bytes, host=est.host_bytes))
    with pytest.raises(InputError, match=r"on cuda:0 \(.* free\) and .* of host memory"):
        budget.check_budget(analysis, geo, sizing, torch.device("cuda:0"), fraction=0.5, room=tight_device)


def test_nothing_fits_says_what_to_reduce() -> None:
    analysis, geo, sizing = _setup(8, 1_000_000)
    with pytest.raises(InputError, match="not even 2 requests fit: lower --tokens or reduce with --layers"):
        budget.check_budget(
            analysis, geo, sizing, torch.device("cpu"), fraction=0.5, room=budget.Capacity(device=None, host=2**30)
        )
