"""docs/bugs.md's table is generated from the records (bugs, faults' replays, replay cases): a bug added, a fault
landed or a case moved out of PENDING shows here until the table is regenerated (python -m kvdoctor.replay.docs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdoctor.core import bugs, replays
from kvdoctor.replay.docs import BEGIN, END, README_BEGIN, README_END, markdown, readme, rewrite

DOC = Path(__file__).resolve().parents[2] / "docs" / "bugs.md"
README = DOC.parents[1] / "README.md"


def test_the_docs_table_is_the_records() -> None:
    text = DOC.read_text(encoding="utf-8")
    table = text.split(BEGIN)[1].split(END)[0]
    assert table == markdown(), "docs/bugs.md is stale: python -m kvdoctor.replay.docs"


def test_the_readme_table_is_the_replayed_bugs() -> None:
    text = README.read_text(encoding="utf-8")
    table = text.split(README_BEGIN)[1].split(README_END)[0]
    assert table == readme(), "README.md's replayed bugs are stale: python -m kvdoctor.replay.docs"
    assert len(table.splitlines()) == 2 + len(replays.replays())


def test_every_bug_has_a_row_and_each_replayed_one_its_command() -> None:
    table = markdown()
    for b in bugs.bugs():
        assert f"[{b.id}](" in table
    assert "`kvdoctor replay --bug sglang#23773`" in table
    assert "control: `kvdoctor consistency lfm2-1.2b" in table  # row 0: the real server, its control by hand


def test_rewrite_replaces_only_the_table(tmp_path: Path) -> None:
    page = tmp_path / "bugs.md"
    page.write_text(f"intro\n\n{BEGIN}| stale |\n{END}\n\nafter\n", encoding="utf-8")
    assert rewrite(page) is True and rewrite(page) is False
    assert page.read_text(encoding="utf-8") == f"intro\n\n{BEGIN}{markdown()}{END}\n\nafter\n"
    (tmp_path / "none.md").write_text("no markers\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no generated table"):
        rewrite(tmp_path / "none.md")
