"""vLLM's replay cases (``kvdoctor.core.replays``): public bugs replayed by vLLM's own offloading worker in-process.

``kvdoctor roundtrip --server vllm --engine vllm --inject FAULT`` stores one request's blocks of every KV-cache group
through vLLM's ``CPUOffloadingWorker`` and loads them into fresh ones; the replay's control is the same round trip
without the fault (every row green), its subject the fault's rows red (``inject_matched``). They run where vLLM is
installed (``make vllm-env``); elsewhere they are reported as not run, never as reproduced. ``PENDING``: cases whose
fault is not registered yet.
"""

from __future__ import annotations

from kvdoctor.core.faults import Target
from kvdoctor.core.replays import Expect, Outcome, Replay

__all__ = ["PENDING", "REPLAYS"]

RED = Expect(Outcome.RED)
# swa-short-store: vLLM's CPU offloading manager asserts on the chunk never stored; the round trip exits 3 saying so
UNSERVED = Expect(Outcome.LOUD, line="cannot serve the sliding-window hit")


def _roundtrip(bug: str, model: str, fault: str, *args: str, expect: Expect = RED, **size: int) -> Replay:
    return Replay(
        bug,
        "vllm",
        model,
        "in-process",
        "roundtrip",
        fault,
        expect,
        Target.ENGINE,
        subject_args=args,
        control_args=args,
        **size,  # type: ignore[arg-type]
    )


REPLAYS: tuple[Replay, ...] = (
    _roundtrip("vllm#53084", "nemotron-h-8b", "null-source"),
    _roundtrip("kvcached#424", "llama-3.1-8b", "mis-stride", "--kv-cache-dtype", "fp8_per_token_head"),
    _roundtrip("vllm#56701", "gemma-3-12b", "swa-short-store", expect=UNSERVED, tokens=2048, layers=2),
)

# Their faults are being built (issue 30); each moves to REPLAYS when its fault is registered.
PENDING: tuple[Replay, ...] = ()
