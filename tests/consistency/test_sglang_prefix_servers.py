"""Real SGLang 0.5.23 servers on this machine, ``--scenario prefix-cache`` (``make test-server``, in .venv-server/;
minutes each): a reference with the radix cache off against a subject with it on, every compared token.

All ``matrix`` (``make consistency-matrix``): a shrunk Llama is identical with every hit proven (each hit and warm
request's ``meta_info.cached_tokens`` > 0, ``sglang:cached_tokens_total`` > 0 on the subject, 0 on the reference);
a shrunk LFM2 too (its no_buffer checkpoints hit), and red under ``blank-state-on-hit`` (sglang#29368),
``stale-state-on-hit`` (sglang#31474) and ``unwritten-checkpoint`` (sglang#16053), only in its hit phases (tokens or
logprobs), with the first divergence named and the fault's firings counted. CI runs LFM2's control and
``blank-state-on-hit`` on one launch through ``kvdoctor replay`` (test_replay_servers.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.consistency.test_servers import assert_clean, consistency

pytestmark = [pytest.mark.server, pytest.mark.matrix]

# 4 conversations x 3 (turn 1, a hit, a warm hit) + 4 refills: 16 compared requests, and the eviction wave.
WORKLOAD = ("--requests", "12", "--prompt-tokens", "16", "--max-new-tokens", "16", "--concurrency", "8")
SCENARIO = ("--scenario", "prefix-cache", "--topology", "single")
HIT_PHASES = ("hit", "warm")


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("prefix-cache")


def assert_hits_proven(doc: dict[str, Any]) -> None:
    """Every hit and warm request read cached tokens on the subject; the reference computed every token."""
    cache = doc["prefix_cache"]
    assert cache["source"] == "metrics" and cache["hits"]["pressured"] > 0 and cache["hits"]["reference"] == 0
    for phase in HIT_PHASES:
        row = cache["by_phase"][phase]
        assert row["requests"] > 0 and row["hit_requests"] == row["requests"], (phase, row)
    assert doc["retractions"]["pressured"] == 0 and doc["retractions"]["reference"] == 0
    assert next(g for g in doc["gates"] if g["name"] == "prefix-cache")["passed"]


def assert_red_in_hit_phases(doc: dict[str, Any], fault: str) -> None:
    """Red because the subject's replies changed, only in requests that hit (turn 1 and its refill are identical),
    the first divergence named, the fault installed and fired. A shrunk LFM2's recurrent state is its ShortConv window
    (the last few inputs): blanking or swapping it moves logprobs (measured: up to 5e-4, the noise floor 5e-7) more
    often than it flips a token, so the red gate is tokens or logprobs, whichever the fault reached."""
    assert doc["exit_reason"] in ("diverged", "logprob_drift"), doc["message"]
    phases = doc["prefix_cache"]["request_phases"]
    diverged = [r["index"] for r in doc["requests"] if r["diverged"]]
    drifted = list((doc.get("logprob_drift") or {}).get("requests", []))
    changed = sorted({*diverged, *drifted})
    assert changed and {phases[i] for i in changed} <= set(HIT_PHASES), (changed, phases)
    if doc["exit_reason"] == "diverged":  # the first divergence: its request and position
        red = [r for r in doc["requests"] if r["diverged"] and not r["within_noise"]]
        first = min(red, key=lambda r: (r["position"] or 0, r["index"]))  # the gate's first: earliest token
        assert f"request {first['index']}" in doc["message"] and first["position"] is not None
    else:  # the first drift: the requests whose logprobs moved before any token did
        assert f"logprobs drift in {len(drifted)}/{doc['total']} requests" in doc["message"]
    assert doc["fault"]["name"] == fault and doc["fault"]["installed"] and doc["fault"]["restores"] > 0
    assert next(g for g in doc["gates"] if g["name"] == "fault-fired")["passed"]
    assert_hits_proven(doc)


def test_llama_prefix_cache_is_identical_with_every_hit_proven(out: Path) -> None:
    code, doc = consistency(out, "llama-3.1-8b", *SCENARIO, workload=WORKLOAD)
    assert code == 0, doc["message"]
    assert doc["identical"] == doc["total"] == 16
    assert_hits_proven(doc)
    assert_clean(doc)


def test_lfm2_with_a_blank_state_on_every_radix_hit_is_red(out: Path) -> None:
    code, doc = consistency(out, "lfm2-1.2b", *SCENARIO, "--inject", "blank-state-on-hit", workload=WORKLOAD)
    assert code == 1, doc["message"]
    assert_red_in_hit_phases(doc, "blank-state-on-hit")
    assert_clean(doc)


def test_lfm2_prefix_cache_is_identical_with_every_hit_proven(out: Path) -> None:
    code, doc = consistency(out, "lfm2-1.2b", *SCENARIO, workload=WORKLOAD)
    assert code == 0, doc["message"]
    assert doc["identical"] == doc["total"] == 16
    assert doc["prefix_cache"]["mamba_cache_mode"]["pressured"] == "no_buffer"
    assert_hits_proven(doc)
    assert_clean(doc)


@pytest.mark.parametrize("fault", ["stale-state-on-hit", "unwritten-checkpoint"])
def test_lfm2_with_a_wrong_cached_state_is_red(out: Path, fault: str) -> None:
    code, doc = consistency(out, "lfm2-1.2b", *SCENARIO, "--inject", fault, workload=WORKLOAD)
    assert code == 1, doc["message"]
    assert_red_in_hit_phases(doc, fault)
    assert_clean(doc)
