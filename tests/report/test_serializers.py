"""The generic report serializers: atomic files, JSON, JUnit, GitHub summary, per-row tables."""

from __future__ import annotations

import json
import math
import os
import stat
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest

from kvdoctor._exceptions import InputError
from kvdoctor.report import atomic, github, junit, rows, serialize


def test_atomic_write_leaves_the_old_file_when_interrupted(tmp_path: Path) -> None:
    target = tmp_path / "result.json"
    target.write_text("old")
    with pytest.raises(KeyboardInterrupt), atomic.atomic_open(target) as fh:
        fh.write("half of the new")
        raise KeyboardInterrupt
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]  # no temp file left


def test_json_carries_dataclasses_decimals_paths_and_nan(tmp_path: Path) -> None:
    @dataclass
    class Row:
        value: Decimal
        where: Path

    target = tmp_path / "out" / "r.json"
    serialize.write(target, {"row": Row(Decimal("2.5"), Path("/x")), "nan": math.nan})
    assert json.loads(target.read_text()) == {"row": {"value": 2.5, "where": "/x"}, "nan": None}


def test_junit_one_case_per_check(tmp_path: Path) -> None:
    cases = [
        junit.Case("accuracy", junit.PASSED, details="0.9 >= 0.8"),
        junit.Case("retraction", junit.FAILED, "no retraction", "pool too large"),
        junit.Case("deployment", junit.ERROR, "decode exited"),
        junit.Case("optional", junit.SKIPPED, "allowed"),
    ]
    target = tmp_path / "junit.xml"
    junit.write(target, "suite", cases)
    suite = ET.parse(target).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == (
        "4",
        "1",
        "1",
        "1",
    )
    outcome = {c.get("name"): (c[0].tag, c[0].get("message")) for c in suite.iter("testcase")}
    assert outcome == {
        "accuracy": ("system-out", None),
        "retraction": ("failure", "no retraction"),
        "deployment": ("error", "decode exited"),
        "optional": ("skipped", "allowed"),
    }


def test_step_summary_only_when_set_and_appended(tmp_path: Path) -> None:
    md = github.summary_markdown("t", "**PASSED**", [github.Row("a|b", "1", ">= 0", "passed")], {"plan": "cmd ```x```"})
    assert github.append_step_summary(md, env={}) is None
    target = tmp_path / "summary.md"
    target.write_text("before\n")
    assert github.append_step_summary(md, env={"GITHUB_STEP_SUMMARY": str(target)}) == target
    text = target.read_text()
    assert text.startswith("before\n### t\n\n**PASSED**")
    assert "| a\\|b | 1 | >= 0 | ✅ pass |" in text and "<details><summary>plan" in text
    assert text.count("```") == 2  # the details' own fences cannot close the block early


def test_step_summary_respects_the_1mib_step_limit(tmp_path: Path) -> None:
    target = tmp_path / "summary.md"
    target.write_bytes(b"x" * (github.STEP_SUMMARY_LIMIT - 100))
    github.append_step_summary("y" * 10_000, env={"GITHUB_STEP_SUMMARY": str(target)})
    assert target.stat().st_size <= github.STEP_SUMMARY_LIMIT


def test_annotation_escaping() -> None:
    line = github.annotation("error", "50% failed\nsee log", title="gate: a,b")
    assert line == "::error title=gate%3A a%2Cb::50%25 failed%0Asee log"
    with pytest.raises(ValueError):
        github.annotation("fatal", "x")


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_tables_round_trip(tmp_path: Path, suffix: str) -> None:
    table = [{"line": 5, "correct": True, "prediction": "18"}, {"line": 6, "correct": False, "prediction": None}]
    target = tmp_path / f"q{suffix}"
    rows.write(target, table)
    frame = pd.read_csv(target) if suffix == ".csv" else pd.read_parquet(target)
    assert frame["line"].tolist() == [5, 6] and frame["correct"].tolist() == [True, False]


def test_tables_refuse_unknown_formats(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        rows.write(tmp_path / "q.xlsx", [{"a": 1}])


def test_junit_strips_characters_xml_cannot_carry(tmp_path: Path) -> None:
    tail = "\x1b[31mTraceback\x1b[0m\x00 at \x0bline 3 \U0001f600"
    target = tmp_path / "junit.xml"
    junit.write(target, "s", [junit.Case("deployment\x00", junit.ERROR, f"boom {tail}", details=tail)])
    case = next(ET.parse(target).iter("testcase"))  # parses: no control character survived
    assert case.get("name") == "deployment"
    assert case[0].get("message") == "boom [31mTraceback[0m at line 3 \U0001f600"
    assert case[0].text == "[31mTraceback[0m at line 3 \U0001f600"


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_atomic_write_gets_the_mode_open_would_give(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        atomic.write_text(tmp_path / "r.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o666 & ~umask
