"""Every hook the fault registry cites for SGLang (``kvdoctor/core/sglang/faults.py``) names its symbol in the
installed SGLang, as the rules' citations do (``test_sglang_citations.py``): the files are read, SGLang is not
imported."""

from __future__ import annotations

import pytest

from kvdoctor.core import faults
from kvdoctor.core.cite import Cite
from kvdoctor.core.sglang import faults as room
from tests.engines.sglang.test_sglang_citations import _lines, _named

pytestmark = pytest.mark.sglang

HOOKS = sorted({c for f in faults.select(server="sglang") for c in f.hooks}, key=str)


def test_every_fault_hook_is_made_by_the_room_s_cite() -> None:
    assert len(HOOKS) >= 8 and set(HOOKS) == set(room.HOOKS)


@pytest.mark.parametrize("cite", HOOKS, ids=str)
def test_fault_hook_names_its_symbol_in_the_installed_sglang(cite: Cite) -> None:
    lines = _lines(cite.path)
    assert 1 <= cite.start <= cite.end <= len(lines), f"{cite} is outside the file ({len(lines)} lines)"
    text = "\n".join(lines[cite.start - 1 : cite.end])
    assert _named(cite.symbol, text), f"{cite} does not name {cite.symbol!r}:\n{text}"
