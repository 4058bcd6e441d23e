"""``kvdoctor replay``: --list runs nothing; bad input is one line and exit 2 before anything is written; a run's
JSON validates against ``kvdoctor schema replay`` with one JUnit case per bug, and its exit code follows the bugs'
verdicts (the servers replaced by a fake runner)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kvdoctor.core import replays
from tests.replay import fakes
from tests.replay.test_run import _answer
from tests.schema_check import assert_valid


def _kvdoctor(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"}
    return subprocess.run(
        [sys.executable, "-m", "kvdoctor", *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd
    )


def test_list_json_names_every_case_and_the_pending_ones_and_validates() -> None:
    out = _kvdoctor("replay", "--list", "--json")
    assert out.returncode == 0, out.stderr
    doc = assert_valid(out.stdout, "replay")
    assert [c["bug"] for c in doc["cases"]] == [r.bug for r in replays.replays()]
    assert [p["bug"] for p in doc["pending"]] == [r.bug for r in replays.pending()]


@pytest.mark.parametrize(
    "args",
    [("replay",), ("replay", "--all", "--bug", "sglang#23773"), ("replay", "--bug", "nope#1"), ("replay", "--bug")],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path: Path, args: tuple[str, ...]) -> None:
    out = _kvdoctor(*args, "--output-dir", str(tmp_path / "out"), "--junit", str(tmp_path / "j.xml"), cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == "" and len(out.stderr.splitlines()) == 1, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def _run_in_process(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str], answer):
    from kvdoctor.cli import app
    from kvdoctor.replay import run

    monkeypatch.setattr(run, "RealRunner", lambda: fakes.FakeRunner(answer, vllm=True))
    code = app._run(argv)
    return code, capsys.readouterr()


def test_a_run_s_json_validates_with_one_junit_case_per_bug(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    junit = tmp_path / "replay.xml"
    argv = ["replay", "--all", "--json", "--junit", str(junit), "--output-dir", str(tmp_path / "out")]
    code, out = _run_in_process(monkeypatch, capsys, argv, _answer)
    doc = assert_valid(out.out, "replay")
    assert code == 0 == doc["exit_code"] and doc["reproduced"] == doc["count"] == len(replays.replays())
    cases = ET.parse(junit).getroot().iter("testcase")
    assert [c.get("name") for c in cases] == [r.bug for r in replays.replays()]


def test_one_bug_not_reproduced_is_exit_1_and_its_junit_case_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fault_changes_nothing(options: object, case: object) -> object:
        return fakes.green("transfer") if getattr(case, "fault", None) == "clear-pd-state" else _answer(options, case)

    junit = tmp_path / "replay.xml"
    argv = ["replay", "--bug", "sglang#23773", "--bug", "sglang#32995", "--junit", str(junit)]
    code, out = _run_in_process(
        monkeypatch, capsys, [*argv, "--output-dir", str(tmp_path / "o")], fault_changes_nothing
    )
    said = " ".join(out.out.split())
    assert code == 1 and "1/2 bugs reproduced" in said and "sglang#32995 not-reproduced" in said
    failed = [c.get("name") for c in ET.parse(junit).getroot().iter("testcase") if c.find("failure") is not None]
    assert failed == ["sglang#32995"]


def test_an_unexpected_dead_deployment_is_exit_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["replay", "--bug", "sglang#23773", "--json", "--output-dir", str(tmp_path / "o")]
    code, out = _run_in_process(monkeypatch, capsys, argv, lambda options, case: fakes.dead("prefill died"))
    doc = json.loads(out.out)
    assert code == 3 and doc["bugs"][0]["status"] == "deployment-failed"
    assert out.err.splitlines()[-1].startswith("kvdoctor: error: 0/1 bugs reproduced")


def test_schema_replay_is_published() -> None:
    out = _kvdoctor("schema", "replay")
    assert out.returncode == 0 and json.loads(out.stdout)["title"] == "kvdoctor replay --json"
