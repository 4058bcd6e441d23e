"""The fault record is the whole fault (docs/design.md, "The fault registry"): every fault a live server takes
(``Target.SERVER``) names the function that does it (``Fault.impl``) and has the fault-fired gate's words.

Read, not run: each implementation's module is found with ``importlib.util.find_spec`` and its source parsed, so
neither SGLang nor vLLM (nor torch) is imported here. The engine suites call every implementation against the
installed server (``tests/engines/sglang/test_sglang_fault_impl.py``, ``tests/engines/vllm/test_vllm_fault_impl.py``).
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

from kvdoctor.core import faults, paths
from kvdoctor.core.consistency_facts import consistency_facts
from kvdoctor.core.faults import Fault, StatePath, Target

SERVER_FAULTS = faults.select(target=Target.SERVER)
# "kvdoctor.engines.<server>.<module>[.<module>...]:<function>"
IMPL = re.compile(r"(?P<module>kvdoctor\.engines\.(?P<server>\w+)(?:\.\w+)+):(?P<function>[A-Za-z_]\w*)")


def _function(module: str, name: str) -> ast.FunctionDef | None:
    """The top-level function NAME of MODULE, read from its source (the module is found, not imported)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def test_there_are_live_faults_on_both_servers_and_only_they_name_an_impl() -> None:
    assert {f.server for f in SERVER_FAULTS} == {"sglang", "vllm"} and len(SERVER_FAULTS) >= 15
    assert [f.name for f in faults.faults() if f.target is not Target.SERVER and f.impl] == []


@pytest.mark.parametrize("fault", SERVER_FAULTS, ids=lambda f: f"{f.server}:{f.name}")
def test_every_live_fault_names_a_function_of_its_server_s_engine(fault: Fault) -> None:
    found = IMPL.fullmatch(fault.impl)
    assert found, (
        f"{fault.server}'s {fault.name}: impl {fault.impl!r} is not "
        f"'kvdoctor.engines.{fault.server}.<module>:<function>' (Fault.impl: the function that installs it)"
    )
    assert found["server"] == fault.server, f"{fault.name}: {fault.impl} is not under kvdoctor.engines.{fault.server}"
    function = _function(found["module"], found["function"])
    assert function is not None, f"{fault.name}: {found['module']} defines no function {found['function']!r}"
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    required_kw = [a for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None]
    assert len(positional) == 1 and not required_kw, f"{fault.impl} must take the fault's name alone"


def test_every_live_fault_has_the_fault_fired_gate_s_words_or_a_path_counted_without_them() -> None:
    """Its own words, else its server's for its path, else its path's (``paths.acts_on``); only a path whose record
    has no fault-fired gate (retraction: its faults are counted as the backups and restores through them) may have
    none."""
    without: list[Fault] = []
    for fault in SERVER_FAULTS:
        words = paths.acts_on(fault, consistency_facts(fault.server).fault_words.get(fault.path))
        if words is None:
            without.append(fault)
        else:
            assert "{n}" in words.on and words.absent, f"{fault.server}'s {fault.name}: {words}"
    counted_without = {p.path for p in paths.PATHS if p.acts_on is None}
    assert counted_without == {StatePath.RETRACTION}
    assert {f.path for f in without} <= counted_without, [f"{f.server}:{f.name}" for f in without]


def test_the_transfer_faults_carry_their_own_words() -> None:
    transfer = faults.select(target=Target.SERVER, path=StatePath.TRANSFER)
    assert transfer and all(f.acts_on is not None for f in transfer)
