"""Real SGLang 0.5.23 servers on this machine, sliding-window eviction (``make consistency-matrix``, in .venv-server/;
minutes each): an all-SWA model (Laguna, every layer sliding, a 64-token window: SGLang's all-SWA pool) whose 32-token
prompts decode 256 tokens through a tight pool. SGLang evicts a request's window only once it has passed the window by
its eviction interval (SGLANG_SWA_EVICTION_INTERVAL, 128 tokens by default), so a request must reach 192 tokens.

- The SWA chunk cache (``--disable-radix-cache`` on both servers: the setting of sglang#23982 / sglang#8649) is
  identical under retraction (measured: 16/16, 11 retractions, 66 s), and red under ``--inject
  swa-early-evict`` (the eviction frees slots still inside the window; measured with 16 requests: 3/16 diverged and 2
  more drifted, first request 1 at token 175, 16 firings, 10 retractions).
- With the radix cache on (SGLang's default, ``PureSWARadixCache``) sglang#31486 is live in 0.5.23 with no fault: the
  finish insert re-caches the slots the window already freed (test_window_faults_sglang.py shows it in SGLang's own
  code), and the first idle check kills the server: "ValueError: pool memory leak detected!", ``[swa] total=9216,
  available=7674, evictable=2310`` (768 slots counted twice: 8 finished requests x the 96 their window freed), exit 3.

All ``matrix``: kept out of CI's chosen few.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.consistency.test_servers import assert_clean, consistency
from tests.consistency.test_sglang_window_plan import all_swa_laguna

pytestmark = [pytest.mark.server, pytest.mark.matrix]

# 16 requests, each 32 + 256 tokens: SGLang first evicts its window at 192 (64 + the 128-token interval).
WORKLOAD = ("--requests", "16", "--prompt-tokens", "32", "--max-new-tokens", "256")
CHUNK_CACHE = ("--", "--disable-radix-cache")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(all_swa_laguna(tmp_path_factory.mktemp("laguna-all-swa")))


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("window")


def test_all_swa_decodes_past_the_window_are_identical_under_retraction(model: str, out: Path) -> None:
    code, doc = consistency(out, model, "--topology", "single", *CHUNK_CACHE, workload=WORKLOAD)
    assert code == 0, doc["message"]
    assert doc["identical"] == doc["total"] == 16 and doc["family"] == "hybrid_swa"
    assert doc["retractions"]["pressured"] > 0 and doc["retractions"]["reference"] == 0
    assert_clean(doc)


def test_all_swa_under_swa_early_evict_is_red_with_the_first_divergence_named(model: str, out: Path) -> None:
    code, doc = consistency(out, model, "--inject", "swa-early-evict", *CHUNK_CACHE, workload=WORKLOAD)
    assert code == 1 and doc["exit_reason"] == "diverged", doc["message"]
    red = [r for r in doc["requests"] if r["diverged"] and not r["within_noise"]]
    first = min(red, key=lambda r: (r["position"] or 0, r["index"]))  # the gate's first: earliest token
    assert f"request {first['index']}" in doc["message"] and first["position"] is not None
    assert first["position"] >= 128, "SGLang evicts nothing before a request reaches 192 tokens (160 new)"
    assert doc["fault"]["name"] == "swa-early-evict" and doc["fault"]["installed"] and doc["fault"]["restores"] > 0
    assert next(g for g in doc["gates"] if g["name"] == "fault-fired")["passed"]
    assert_clean(doc)


def test_sglang_0_5_23_all_swa_radix_cache_dies_of_sglang_31486_with_no_fault(model: str, out: Path) -> None:
    """The real bug, no fault: when SGLang fixes it, this test fails and the case becomes a green control."""
    workload = ("--requests", "32", "--concurrency", "8", "--prompt-tokens", "32", "--max-new-tokens", "256")
    code, doc = consistency(out, model, "--topology", "single", workload=workload)
    assert code == 3 and doc["exit_reason"] == "server_exited", doc["message"]
    assert "died: ValueError: pool memory leak detected!" in doc["message"].splitlines()[0]
    assert doc["survivors"] == []
