"""``kvdoctor replay --list`` read in a CI log (80 columns, and narrower): every bug id, fault and model whole on one
line, so it can be copied back into ``--bug``; and its options: ``--bug`` narrows the list, the options of a run
(``--timeout``, ``--junit``, ``--output-dir``) are bad input there instead of being dropped, and ``--timeout`` must
be > 0 in every mode."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from kvdoctor.cli import replay_cmd
from kvdoctor.core import replays
from tests.schema_check import assert_valid


def _kvdoctor(*args: str, columns: int = 80, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1", "TERM": "dumb"}
    env.pop("GITHUB_STEP_SUMMARY", None)
    return subprocess.run(
        [sys.executable, "-m", "kvdoctor", *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd
    )


def _whole(value: str, text: str) -> bool:
    """VALUE on one line of TEXT, not a piece of a longer word (``sglang#237`` is not ``sglang#23773``)."""
    return re.search(rf"(?<![\w#.-]){re.escape(value)}(?![\w#.-])", text) is not None


@pytest.mark.parametrize("columns", [80, 60, 200])
def test_every_id_fault_and_model_is_whole_on_one_line(columns: int) -> None:
    out = _kvdoctor("replay", "--list", columns=columns)
    assert out.returncode == 0, out.stderr
    doc = json.loads(_kvdoctor("replay", "--list", "--json").stdout)
    for case in doc["cases"]:
        for value in (case["bug"], case["fault"] or "none", case["model"], case["scenario"], case["topology"]):
            assert _whole(value, out.stdout), (value, columns)
        for flag in case["control_args"] if case["fault"] is None else ():  # a control's flags: its whole row
            assert _whole(flag, out.stdout), (flag, columns)
    for case in doc["pending"]:
        assert _whole(case["bug"], out.stdout) and _whole(case["fault"], out.stdout)
    assert max(len(line) for line in out.stdout.splitlines()) <= columns
    assert ("┃ bug" in out.stdout) is (columns == 200)  # a table where it fits whole, blocks where it does not


def test_the_run_table_keeps_ids_whole_at_every_width() -> None:
    """The run's own table (``render``) lays out through the same function: a long first divergence cannot
    squeeze the bug id or the fault into pieces."""
    columns = ("bug", "fault", "scenario", "control", "subject", "first divergence", "wall s", "row")
    first = "request 2 token 5, conv_state (trace)"
    rows = [
        ("sglang#23773", "drop-pd-state", "transfer", "green", "red", first, "9", "ok"),
        ("kvdoctor#overlap", "none", "preempt", "green", "red", "—", "120", "not-reproduced"),
    ]
    for width in (60, 80, 250):
        buffer = io.StringIO()
        replay_cmd.print_rows(Console(file=buffer, width=width, color_system=None), "kvdoctor replay", columns, rows)
        text = buffer.getvalue()
        for row in rows:
            for value in (row[0], row[1], row[7]):
                assert _whole(value, text), (value, width)
        assert max(len(line) for line in text.splitlines()) <= width


def test_list_with_bugs_lists_those_alone_and_its_json_validates() -> None:
    pending = replays.pending()[0].bug
    out = _kvdoctor("replay", "--list", "--bug", "sglang#23773", "--bug", pending.upper())
    assert out.returncode == 0, out.stderr
    assert _whole("sglang#23773", out.stdout) and _whole(pending, out.stdout)
    assert not _whole("sglang#32995", out.stdout)
    assert "1 case, 1 pending" in out.stdout
    doc = assert_valid(_kvdoctor("replay", "--list", "--bug", "sglang#23773", "--json").stdout, "replay")
    assert [c["bug"] for c in doc["cases"]] == ["sglang#23773"] and doc["count"] == 1 and doc["pending"] == []
    every = json.loads(_kvdoctor("replay", "--list", "--all", "--json").stdout)
    assert every["count"] == len(replays.replays())


@pytest.mark.parametrize(
    "args",
    [
        ("--list", "--timeout", "60"),
        ("--list", "--junit", "j.xml"),
        ("--list", "--output-dir", "out"),
        ("--list", "--timeout", "0"),
        ("--list", "--bug", "nope#1"),
        ("--list", "--all", "--bug", "sglang#23773"),
        ("--all", "--timeout", "0"),
        ("--bug", "sglang#23773", "--timeout", "-5", "--junit", "j.xml"),
    ],
)
def test_list_refuses_what_it_would_drop_and_timeout_must_be_positive(tmp_path: Path, args: tuple[str, ...]) -> None:
    out = _kvdoctor("replay", *args, cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == "", (out.returncode, out.stdout[-300:])
    assert len(out.stderr.splitlines()) == 1 and out.stderr.startswith("kvdoctor: error: "), out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written
    if "0" in args or "-5" in args:
        assert "--timeout must be > 0" in out.stderr
