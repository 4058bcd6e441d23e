"""The scenario seam (architecture §3.1), held: whatever differs by scenario is asked of one table, never branched on.

Every scenario is one behaviour object (``kvdoctor/consistency/scenarios/<scenario>.py``, one line of
``scenarios.SCENARIOS``) and, per server that runs it, one part (``consistency/servers/<server>/<scenario>.py``, one
line of that room's ``Deployment.scenarios``). Read with ``ast`` from every module under ``kvdoctor/``, as
``tests/test_layering.py`` reads imports, nowhere else may code:

- compare a scenario (``o.scenario == "offload"``, ``scenario != PREFIX_CACHE``, ``o.scenario in (...)``), nor compare
  with a scenario's name constant (``PREEMPT``, ``PREFIX_CACHE``, ``OFFLOAD``, ``TRANSFER``);
- ``isinstance`` (``issubclass``, ``type(r) is``) on a scenario's result class (``PrefixCacheResult``, ...);
- ``getattr`` / ``hasattr`` on a scenario's evidence field (``prefix_cache``, ``offload``, ``transfer``, ``scenario``).

The shared run (``consistency/run.py``), the gates and the terminal printer (``cli/consistency.py``) also name no
scenario in a string. The count of branch sites this scanner finds outside the scenario modules is 0; the
architecture measured 33 in 7 modules before the seam.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

import kvdoctor
from kvdoctor.consistency import gates, scenarios, servers
from kvdoctor.consistency.result import ConsistencyResult
from kvdoctor.core import paths

PACKAGE = Path(kvdoctor.__file__).parent
SCENARIO_PACKAGE = PACKAGE / "consistency" / "scenarios"
ROOMS = PACKAGE / "consistency" / "servers"
NAME_CONSTANTS = frozenset({"PREEMPT", "PREFIX_CACHE", "OFFLOAD", "TRANSFER"})
COMPARISONS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot)
# The shared modules that must call the table and never name a scenario, even in a string (the gates are named after
# what they prove, ``Gate("transfer", ...)``: gates.py is held by the branch scanner alone).
NAMES_NONE = ("consistency/run.py", "consistency/fault_gate.py", "cli/consistency.py")


@cache
def result_classes() -> frozenset[str]:
    """Every scenario's own result class (the plain result is preempt's, and every scenario's base)."""
    return frozenset(
        s.result_class.__name__
        for s in map(scenarios.get, scenarios.names())
        if s.result_class is not ConsistencyResult
    )


@cache
def evidence_fields() -> frozenset[str]:
    """The fields a scenario's result adds to the plain result (its evidence, and ``scenario``)."""
    base = {f.name for f in dataclasses.fields(ConsistencyResult)}
    found: set[str] = set()
    for name in scenarios.names():
        found |= {f.name for f in dataclasses.fields(scenarios.get(name).result_class)} - base
    return frozenset(found)


def allowed(path: Path) -> bool:
    """A scenario's own module, or a server's part of one (``servers/<server>/<scenario>.py``)."""
    if SCENARIO_PACKAGE in path.parents:
        return True
    modules = {name.replace("-", "_") for name in scenarios.names()}
    return path.parent.parent == ROOMS and path.stem in modules


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_name_constant(node: ast.AST) -> bool:
    """``PREFIX_CACHE`` or ``scenario.PREFIX_CACHE``, not ``StatePath.TRANSFER`` (a state path, not a scenario)."""
    owner = node.value if isinstance(node, ast.Attribute) else None
    return _name(node) in NAME_CONSTANTS and not (owner is not None and _name(owner) == "StatePath")


def _elements(node: ast.AST) -> list[ast.AST]:
    """NODE, and a literal container's elements (``x in (PREEMPT, OFFLOAD)``)."""
    return [node, *node.elts] if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]


def branches(source: str) -> Iterator[tuple[int, str]]:
    """Every scenario branch site of SOURCE: (line, what)."""
    classes, fields = result_classes(), evidence_fields()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(isinstance(op, COMPARISONS) for op in node.ops):
            sides = [e for s in (node.left, *node.comparators) for e in _elements(s)]
            if any(_name(s) == "scenario" for s in sides) or any(_is_name_constant(s) for s in sides):
                yield node.lineno, "compares a scenario"
            if any(_name(s) in classes for s in sides):
                yield node.lineno, "compares with a scenario's result class"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) >= 2:
            kind, second = node.func.id, node.args[1]
            if kind in ("isinstance", "issubclass"):
                named = second.elts if isinstance(second, ast.Tuple) else [second]
                if any(_name(n) in classes for n in named):
                    yield node.lineno, f"{kind} on a scenario's result class"
            elif kind in ("getattr", "hasattr") and isinstance(second, ast.Constant) and second.value in fields:
                yield node.lineno, f"{kind} on a scenario's evidence field {second.value!r}"


@cache
def sites() -> tuple[tuple[Path, int, str], ...]:
    """Every branch site under kvdoctor/, wherever it is."""
    return tuple(
        (path, line, what)
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, what in branches(path.read_text(encoding="utf-8"))
    )


def test_the_reader_finds_each_kind_of_branch() -> None:
    source = (
        "if o.scenario == 'offload': pass\n"
        "if scenario != PREFIX_CACHE: pass\n"
        "if x in (scenario.TRANSFER,): pass\n"
        "if isinstance(r, (ConsistencyResult, PrefixCacheResult)): pass\n"
        "cache = getattr(r, 'prefix_cache', None)\n"
        "if type(r) is OffloadResult: pass\n"
        "if fault.path is StatePath.TRANSFER: pass\n"  # a state path: not a scenario
        "run = scenarios.get(o.scenario).judge(r, {}, 'sglang')\n"  # a table lookup: not a branch
    )
    assert [line for line, _ in branches(source)] == [1, 2, 3, 4, 5, 6]


def test_no_scenario_branch_outside_the_scenario_modules_and_the_servers_parts() -> None:
    outside = [f"{p.relative_to(PACKAGE.parent)}:{line} {what}" for p, line, what in sites() if not allowed(p)]
    assert outside == [], "ask the scenario table (kvdoctor.consistency.scenarios) or the server's part:\n" + "\n".join(
        outside
    )


def test_the_shared_run_the_gates_and_the_printer_name_no_scenario() -> None:
    names = set(scenarios.names())
    found = []
    for relative in NAMES_NONE:
        tree = ast.parse((PACKAGE / relative).read_text(encoding="utf-8"))
        docstrings = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and n.body
            and isinstance(n.body[0], ast.Expr)
        }
        found += [
            f"{relative}:{n.lineno} {n.value!r}"
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and n.value in names and id(n) not in docstrings
        ]
    assert found == []


def test_each_table_line_names_its_scenario_and_each_result_class_is_its_own() -> None:
    assert scenarios.DEFAULT in scenarios.SCENARIOS
    made = [scenarios.get(name) for name in scenarios.names()]
    assert [s.name for s in made] == list(scenarios.SCENARIOS)
    assert len({s.result_class for s in made}) == len(made)
    for s in made:
        blank = s.result_class("m", "dense", "single", "cpu", True, {})
        assert scenarios.of(blank) is s


def test_each_servers_parts_live_in_its_room_one_module_per_scenario() -> None:
    for server in servers.names():
        table = servers.deployment(server).scenarios
        assert set(table) <= set(scenarios.SCENARIOS), server
        for name, where in table.items():
            module = where.partition(":")[0]
            assert module == f"kvdoctor.consistency.servers.{server}.{name.replace('-', '_')}", (server, name)
            assert servers.part(server, name) is servers.load_part(where)


def test_each_path_names_a_scenario_whose_gates_prove_it() -> None:
    """Every state path's record names a scenario of the table, and that scenario's gates include the path's proof
    gate (a replay's control is green for the right reason only with it)."""
    for record in paths.PATHS:
        scenario = scenarios.get(record.scenario)
        judged = scenario.judge(scenario.result_class("m", "dense", "single", "cpu", True, {}), {}, "sglang")
        assert record.proof_gate in {g.name for g in judged}, record
    assert paths.proof_gate("roundtrip") is None


def test_a_scenario_gates_the_result_between_the_logprobs_and_the_sensitivity() -> None:
    offload = scenarios.get("offload").judge(
        scenarios.get("offload").result_class("m", "d", "s", "c", True, {}), {}, "vllm"
    )
    assert [g.name for g in offload] == ["pressure", "offload"]
    assert all(isinstance(g, gates.Gate) for g in offload)


@pytest.mark.parametrize("relative", ["consistency/run.py", "cli/consistency.py", "consistency/servers/vllm/plan.py"])
def test_the_modules_that_once_branched_are_read(relative: str) -> None:
    assert (PACKAGE / relative).is_file(), "a module this guard was written against moved: point it at its new home"
