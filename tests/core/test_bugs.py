"""The bug records (``kvdoctor.core.bugs``): one per row of the reference, ids of one form, every fault's ``replays``
naming a known bug, torch-free."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from kvdoctor.core import bugs, faults

ID = re.compile(r"^[a-z0-9-]+#[0-9]+$")


def test_every_id_is_the_first_link_s_project_and_number() -> None:
    for b in bugs.bugs():
        if b.id == "kvdoctor#overlap":
            continue
        assert ID.match(b.id), b.id
        project, number = b.id.split("#")
        assert b.urls[0].rstrip("/").endswith(f"/{number}"), (b.id, b.urls[0])
        assert project in b.urls[0].lower(), (b.id, b.urls[0])


def test_ids_and_rows_are_unique_and_every_row_of_the_reference_is_there() -> None:
    ids = bugs.ids()
    assert len(ids) == len(set(ids))
    rows = [b.row for b in bugs.bugs() if b.row is not None]
    assert len(rows) == len(set(rows))
    # The reference table's rows (bug-replay.md, issue 30): 0-34 less the numbers it skips.
    assert sorted(rows) == [0, 1, 2, *range(5, 11), *range(12, 17), *range(18, 35)]


def test_every_fault_that_replays_a_bug_names_a_known_one() -> None:
    unknown = {(f.name, b) for f in faults.faults() for b in f.replays if b not in bugs.ids()}
    assert not unknown, f"faults naming bugs kvdoctor.core.bugs does not hold: {sorted(unknown)}"


def test_get_is_case_insensitive_and_names_the_ids_when_unknown() -> None:
    assert bugs.get(" SGLang#23773 ").row == 1
    with pytest.raises(KeyError, match="known: kvdoctor#overlap, sglang#23773"):
        bugs.get("sglang#1")


def test_the_records_import_no_torch_and_no_server() -> None:
    code = "import sys, kvdoctor.core.bugs, kvdoctor.core.replays; kvdoctor.core.replays.replays()\n"
    code += "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'sglang', 'vllm', 'httpx')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
