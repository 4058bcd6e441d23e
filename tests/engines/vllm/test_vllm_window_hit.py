"""A sliding-window group's offload hit served by vLLM 0.33's own scheduler-side code (``window_hit``), and
``swa-short-store``, the replay of vllm#56701: the connector stores and looks up the bare window while the block
manager retains a multi-module MTP's tail below it, so the hit loads a chunk never stored and vLLM's CPU manager says
so (exit 3, its own message). The same round trip with vLLM 0.33's windows is green, with or without the tail.

Runs in .venv-vllm/ (``make test-vllm``); every ``vllm.*`` object here is the installed wheel's.
"""

from __future__ import annotations

import pytest

from kvdoctor._exceptions import EXIT_DEPLOYMENT, EXIT_INPUT, DeploymentError, InputError
from kvdoctor.core import faults
from kvdoctor.engines.vllm.roundtrip import run_vllm_roundtrip

pytestmark = pytest.mark.vllm

SLIDING, DENSE = "gemma-3-12b", "llama-3.1-8b"
TOKENS = 2048  # 128 chunks of 16 tokens: twice Gemma-3's 1024-token window
WINDOW_CHUNKS = 1024 // 16


def test_swa_short_store_names_vllm_56701() -> None:
    (record,) = [f for f in faults.select(server="vllm") if f.name == "swa-short-store"]
    assert record.replays == ("vllm#56701",) and record.needs.value == "swa"


def test_every_sliding_window_group_s_hit_is_served_from_what_vllm_stored() -> None:
    """No retained tail (the launch line has no MTP drafter): the store keeps the window's chunks, the lookup
    reports the whole prefix, the hit loads exactly those chunks."""
    r = run_vllm_roundtrip(SLIDING, tokens=TOKENS)
    assert r.ok and r.failing == []
    windows = {c.group for c in r.ledger if c.spec == "SlidingWindowSpec"}
    assert windows and {h.group for h in r.window_hits} == windows
    for hit in r.window_hits:
        assert (hit.extra_retained_tokens, hit.stored_chunks, hit.loaded_chunks) == (0, WINDOW_CHUNKS, WINDOW_CHUNKS)
        assert hit.hit_tokens == TOKENS


def test_the_retained_tail_with_vllm_s_windows_is_green() -> None:
    """The correct configuration: a 3-module MTP's tail (extra_retained_tokens 2) and vLLM 0.33's windows, which
    widen the stored window by it; the hit loads one chunk more than the bare window, every one stored."""
    r = run_vllm_roundtrip(SLIDING, tokens=TOKENS, extra_retained_tokens=2)
    assert r.ok and r.window_hits
    for hit in r.window_hits:
        assert (hit.extra_retained_tokens, hit.stored_chunks, hit.loaded_chunks) == (2, WINDOW_CHUNKS + 1, 65)
    sizes = {c.spec: len(c.block_ids) for c in r.ledger}
    assert sizes["SlidingWindowSpec"] == -(-(1024 - 1 + 2) // 16) + 1  # the byte round trip moves the tail too


@pytest.mark.parametrize("tail", [0, 2, 40])
def test_swa_short_store_is_loud_with_vllm_s_own_message(tail: int) -> None:
    """The bare window stored and looked up, the retained tail loaded: vLLM's CPUOffloadingManager.prepare_load
    asserts on the first chunk below the window (exit 3), never a green round trip."""
    with pytest.raises(DeploymentError) as caught:
        run_vllm_roundtrip(SLIDING, tokens=TOKENS, inject="swa-short-store", extra_retained_tokens=tail)
    line = str(caught.value)
    assert caught.value.exit_code == EXIT_DEPLOYMENT and "\n" not in line
    assert "Chunk b'kvdoctor-chunk-" in line and "not found in cache" in line
    assert line.startswith("vLLM's CPU offloading manager cannot serve the sliding-window hit of group g")
    assert f"the store kept the last {WINDOW_CHUNKS} chunks" in line


def test_swa_short_store_on_a_model_without_a_sliding_window_is_exit_2() -> None:
    with pytest.raises(InputError, match=r"^--inject swa-short-store: no KV-cache group .* sliding window") as caught:
        run_vllm_roundtrip(DENSE, tokens=TOKENS, inject="swa-short-store")
    assert caught.value.exit_code == EXIT_INPUT


def test_swa_short_store_on_a_request_inside_its_window_is_exit_2() -> None:
    """256 tokens sit inside the 1024-token window: the hit loads nothing below it, so the fault would change
    nothing."""
    with pytest.raises(InputError, match=r"raise --tokens to at least 1058$") as caught:
        run_vllm_roundtrip(SLIDING, inject="swa-short-store")
    assert caught.value.exit_code == EXIT_INPUT
