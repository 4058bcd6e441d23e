"""``--fault-file`` on real SGLang 0.5.23 servers (``make test-server``, in .venv-server/; minutes).

The worked example of docs/fault-file.md, exactly as the doc shows it (``examples/fault_files/swap_state_slots.py``):
on a shrunk LFM2, single topology (the cheapest real run: two servers), the pressured server's first decode step with
two or more requests swaps their recurrent state. The run must be red for the divergence, with the fault-fired gate
green (the fault was installed by the site hook and fired once, while armed) and every other gate green: the
pressure gate (the pressured server retracted), the noise floor and the stand-in.

Measured (2 cores, checkpoint cached): 231 s wall (start-up 90 s, bursts 36 + 41 + 55 s); 3 retractions, the
reference 0; one firing (slots 10 and 30); request 2 diverged at token 2 (946 -> 808) and request 7 drifted
(max |dlogprob| 0.0022 against a noise floor of 4.8e-07); red, exit reason ``diverged``. This test: 1 passed in
212 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kvdoctor.engines import hook_log

# make consistency-matrix: CI's budget goes to the sweep's real-server test, which runs a fault file too
pytestmark = [pytest.mark.server, pytest.mark.matrix]

EXAMPLE = Path(__file__).parents[2] / "examples" / "fault_files" / "swap_state_slots.py"
TARGET = "sglang.srt.managers.scheduler:Scheduler.run_batch"
# 16 requests retract on one server (8 did not: measured 0 retractions); 32 new tokens keep LFM2's Triton-interpreted
# conv (~7 tok/s) to about a minute a burst.
WORKLOAD = ("--requests", "16", "--prompt-tokens", "16", "--max-new-tokens", "32", "--concurrency", "16")
TIMEOUT_S = 900


def consistency(out: Path, model: str, *args: str) -> tuple[int, dict[str, Any]]:
    kvdoctor = Path(sys.executable).with_name("kvdoctor")
    out = Path(os.environ.get("KVDOCTOR_CONSISTENCY_OUT", str(out)))
    argv = [str(kvdoctor), "consistency", model, "--shrink", "--device", "cpu", "--json", "--output-dir", str(out)]
    done = subprocess.run(
        [*argv, *WORKLOAD, "--timeout", str(TIMEOUT_S), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S + 60,
        check=False,
    )
    sys.stderr.write(done.stderr[-4000:])
    assert done.stdout, done.stderr[-2000:]
    return done.returncode, json.loads(done.stdout)


def test_the_docs_example_swapping_two_requests_state_is_red_with_the_fault_fired(tmp_path: Path) -> None:
    code, doc = consistency(tmp_path, "lfm2-1.2b", "--fault-file", str(EXAMPLE))
    gates = {g["name"]: g for g in doc["gates"]}
    assert code == 1 and doc["exit_reason"] in ("diverged", "logprob_drift"), doc["message"]
    fired = gates["fault-fired"]
    assert fired["passed"], fired["message"]
    assert fired["message"] == f"fault file swap_state_slots fired: {TARGET} (single) 1"
    failed = sorted(name for name, g in gates.items() if not g["passed"])
    assert failed in (["tokens"], ["logprobs"], ["logprobs", "tokens"]), failed  # the fault's divergence, nothing else
    assert doc["retractions"]["pressured"] > 0 and doc["noise_floor"]["diverged_requests"] == 0
    touched = {r["index"] for r in doc["requests"] if r["diverged"]} | set(doc["logprob_drift"]["requests"])
    assert 1 <= len(touched) <= 2, touched  # the swapped pair, and no other request
    assert doc["stand_in"]["calls"] == [] and doc["survivors"] == []
    record = doc["fault_file"]  # the file's own record, as --inject's fault has one
    assert (record["name"], record["path"], record["refused"]) == ("swap_state_slots", str(EXAMPLE.resolve()), None)
    assert record["loaded"] >= 1  # each Python process of the pressured server (the scheduler's own included)
    assert [(w["target"], w["role"], w["installed"], w["fired"]) for w in record["wraps"]] == [
        (TARGET, "single", True, 1)
    ]
    log = hook_log.read(Path(doc["run_dir"]) / "site-hook.log")
    (line,) = log.details("fault-fired")  # one firing, in the pressured burst only, naming the two requests
    assert line.startswith(f"swap_state_slots {TARGET} single swapped the state of")
    assert log.count("fault-installed") >= 1 and log.count("fault-refused", "fault-unresolved", "hook-failed") == 0
