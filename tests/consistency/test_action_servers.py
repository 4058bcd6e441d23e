"""The GitHub Action with ``server: sglang``: its install step builds (here: finds up to date) the real-server
environment with the Makefile, and its run step drives ``kvdoctor consistency`` on real SGLang servers; green, with
the step summary, the artifact and the outputs. The steps run as ``tests/api/test_action.py`` runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.api.test_action import ACTION, Runner

# One PD consistency run (about 110 s; over PD the pressured decode retracts reliably, a single server did not
# always): the action's real-server path, one of CI's chosen few.
pytestmark = pytest.mark.server


def test_the_action_runs_consistency_on_real_sglang_servers(tmp_path: Path) -> None:
    inputs = {"command": "consistency", "model": "llama-3.1-8b", "server": "sglang", "args": "--shrink --topology pd"}
    runner = Runner(tmp_path, inputs)
    ran = runner.run()
    assert [code for _, code in ran] == [0] * len(ACTION["runs"]["steps"]), ran
    assert runner.steps["install"]["kvdoctor"].endswith(".venv-server/bin/kvdoctor")
    assert runner.steps["run"]["verdict"] == "pass" and runner.steps["run"]["exit-code"] == "0"
    artifact = tmp_path / "artifacts" / "kvdoctor-consistency-kvdoctor-test"
    doc = json.loads((artifact / "report.json").read_text())
    # a pass only from a run that retracted on real servers, without a stand-in called
    assert doc["retractions"]["pressured"] > 0 and doc["identical"] == doc["total"] > 0
    gates = {g["name"]: g["passed"] for g in doc["gates"]}
    assert gates["pressure"] and gates["stand-in-unused"] and all(gates.values()), gates
    assert "**passed**" in (tmp_path / "step-summary.md").read_text()
    assert (artifact / "junit.xml").read_text().count("<testcase") >= 2
