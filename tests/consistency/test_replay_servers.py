"""``kvdoctor replay`` on real SGLang 0.5.23 servers (``make test-server``, in .venv-server/; minutes each): a public
bug's control and its subject measured on ONE launch (the reference once, the subject once, the fault armed inside
the subject between the two bursts), the row passing only with the control green for the right reason (its path
proven) and the subject red for the right reason (the fault seen firing, a divergence gate failed).

CI's chosen few: a prefix-hit bug (sglang#29368: LFM2's radix hits restore a blank recurrent state) and a PD
transfer bug (sglang#23773: the prefill reports the state sent and sends nothing). ``make replay-matrix`` runs every
bug (``kvdoctor replay --all``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tests.consistency.test_servers import TIMEOUT_S

pytestmark = pytest.mark.server


def replay(tmp_path: Path, bug: str) -> tuple[int, dict[str, Any], Path]:
    kvdoctor = Path(sys.executable).with_name("kvdoctor")
    junit = tmp_path / "replay.xml"
    argv = [str(kvdoctor), "replay", "--bug", bug, "--json", "--junit", str(junit), "--output-dir", str(tmp_path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S + 60, check=False)
    sys.stderr.write(done.stderr[-4000:])
    assert done.stdout, done.stderr[-2000:]
    return done.returncode, json.loads(done.stdout), junit


def assert_reproduced_on_one_launch(code: int, doc: dict[str, Any], junit: Path, proof: str) -> dict[str, Any]:
    (row,) = doc["bugs"]
    assert code == 0 and row["status"] == "reproduced", row["reason"]
    assert doc["matrix"]["launches"] == 1 and doc["matrix"]["groups"][0]["cases"] == ["no-fault", row["fault"]]
    control, subject = row["control"], row["subject"]
    assert (control["verdict"], subject["verdict"]) == ("green", "red")
    assert control["run_dir"] == subject["run_dir"]  # one launch: one run directory, one record per case
    kept = {p.name: json.loads(p.read_text()) for p in Path(subject["run_dir"]).glob("result-*.json")}
    assert set(kept) == {"result-no-fault.json", f"result-{row['fault']}.json"}
    clean, faulted = kept["result-no-fault.json"], kept[f"result-{row['fault']}.json"]
    assert clean["exit_code"] == 0 and clean["fault"] is None
    assert next(g for g in clean["gates"] if g["name"] == proof)["passed"]  # the control ran its path
    assert faulted["exit_code"] == 1 and faulted["fault"]["name"] == row["fault"]
    assert next(g for g in faulted["gates"] if g["name"] == "fault-fired")["passed"]
    assert faulted["survivors"] == [] and clean["survivors"] == []
    (case,) = ET.parse(junit).getroot().iter("testcase")
    assert case.get("name") == row["bug"] and case.find("failure") is None and case.find("error") is None
    return faulted


@pytest.mark.matrix  # CI replays the PD transfer's bug (one launch, a third of the time): make consistency-matrix
def test_a_blank_recurrent_state_on_every_radix_hit_is_red_beside_its_green_control(tmp_path: Path) -> None:
    code, doc, junit = replay(tmp_path, "sglang#29368")
    faulted = assert_reproduced_on_one_launch(code, doc, junit, "prefix-cache")
    phases = faulted["prefix_cache"]["request_phases"]
    changed = {r["index"] for r in faulted["requests"] if r["diverged"]}
    changed |= set((faulted.get("logprob_drift") or {}).get("requests", []))
    assert changed and {phases[i] for i in changed} <= {"hit", "warm"}, (changed, phases)  # only requests that hit


def test_a_state_the_prefill_never_sent_is_red_beside_its_green_control(tmp_path: Path) -> None:
    code, doc, junit = replay(tmp_path, "sglang#23773")
    faulted = assert_reproduced_on_one_launch(code, doc, junit, "transfer")
    assert faulted["deployment"]["injected_role"] == "prefill"
    assert next(g for g in faulted["gates"] if g["name"] == "transfer")["passed"]  # every request crossed it
