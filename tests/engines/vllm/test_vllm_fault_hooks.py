"""Every hook the fault registry cites for vLLM (``kvdoctor/core/vllm/faults.py``) names its symbol in the installed
vLLM (the 0.33.0 wheel of .venv-vllm/, the release the rule model restates): the files are read, vLLM is not
imported."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from kvdoctor.core import faults
from kvdoctor.core.cite import Cite
from kvdoctor.core.vllm import faults as room

pytestmark = pytest.mark.vllm

HOOKS = sorted({c for f in faults.select(server="vllm") for c in f.hooks}, key=str)


def _vllm_root() -> Path:
    spec = importlib.util.find_spec("vllm")  # locates the package without importing it
    assert spec is not None and spec.origin, "vLLM is not installed here"
    return Path(spec.origin).parent


def test_every_fault_hook_is_made_by_the_room_s_cite() -> None:
    assert len(HOOKS) >= 7 and set(HOOKS) == set(room.HOOKS)


@pytest.mark.parametrize("cite", HOOKS, ids=str)
def test_fault_hook_names_its_symbol_in_the_installed_vllm(cite: Cite) -> None:
    file = _vllm_root() / cite.path
    assert file.is_file(), f"{cite}: no such file in the installed vLLM ({_vllm_root()})"
    lines = file.read_text(encoding="utf-8").splitlines()
    assert 1 <= cite.start <= cite.end <= len(lines), f"{cite} is outside the file ({len(lines)} lines)"
    text = "\n".join(lines[cite.start - 1 : cite.end])
    pattern = rf"(?<![A-Za-z0-9_]){re.escape(cite.symbol)}(?![A-Za-z0-9_])"
    assert re.search(pattern, text), f"{cite} does not name {cite.symbol!r}:\n{text}"
