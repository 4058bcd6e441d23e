"""``kvdoctor replay``'s vLLM cases run by the vLLM engine env's interpreter when the replay runs from another env
(the real-server env has no vLLM): ``kvdoctor roundtrip ... --json`` there, its document read back into the rows a
verdict reads, and a loud end (exit 3) as the round trip's own last line. Runs in .venv-vllm/ (``make test-vllm``),
with this interpreter standing for the engine env's.
"""

from __future__ import annotations

import sys

import pytest

from kvdoctor._exceptions import DeploymentError
from kvdoctor.core.replays import get
from kvdoctor.replay.plan import side
from kvdoctor.replay.run import _roundtrip_in

pytestmark = pytest.mark.vllm


def test_the_null_source_replay_reads_its_rows_back_from_the_engine_env() -> None:
    r = get("vllm#53084")
    control, subject = side(r, control=True), side(r, control=False)
    clean = _roundtrip_in(sys.executable, control.key, None)()
    assert clean.ok and clean.failing == [] and clean.inject_matched is None and clean.components > 0
    faulted = _roundtrip_in(sys.executable, subject.key, r.fault)()
    assert not faulted.ok and faulted.inject_matched is True and faulted.failing == faulted.expected_red


def test_a_loud_round_trip_is_a_deployment_error_with_its_own_line() -> None:
    r = get("vllm#56701")
    with pytest.raises(DeploymentError, match="cannot serve the sliding-window hit") as caught:
        _roundtrip_in(sys.executable, side(r, control=False).key, r.fault)()
    assert "roundtrip gemma-3-12b --server vllm" in str(caught.value) and "\n" not in str(caught.value)
