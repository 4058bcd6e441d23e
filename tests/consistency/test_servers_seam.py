"""The server seam of ``kvdoctor consistency``: one prepare and one run for every server, each server's side behind
:class:`kvdoctor.consistency.servers.Deployment`, one table line per server (issue 29)."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest

from kvdoctor._exceptions import InputError
from kvdoctor.consistency import run, scenarios, servers
from kvdoctor.consistency.servers.sglang import deployment as sglang_room
from kvdoctor.consistency.servers.vllm import deployment as vllm_room

PACKAGE = Path(run.__file__).parent
ENGINE_INTERNALS = ("kvdoctor.engines.vllm.server_plugin", "kvdoctor.engines.sglang.live_faults")
ENGINE_INTERNALS += ("kvdoctor.engines.sglang.cpu_shims",)


class ThirdServer:
    """A tiny fake server's room: it runs preempt and prefix-cache, and records which phase of prepare reached it."""

    scenarios: ClassVar[dict[str, str]] = {name: f"{__name__}:THIRD" for name in ("preempt", "prefix-cache", "offload")}

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        def called(*args: Any, **kw: Any) -> Any:
            self.calls.append(name)
            if name == "shrink":
                return args[0]
            if name == "bound":
                return replace(args[0], prompts=[[5, 6]])
            return False if name == "stand_in" else None

        return called


THIRD = ThirdServer()


@pytest.fixture
def third(monkeypatch: pytest.MonkeyPatch) -> ThirdServer:
    THIRD.calls.clear()
    monkeypatch.setitem(servers.DEPLOYMENTS, "trt", f"{__name__}:THIRD")
    return THIRD


def test_each_server_is_one_table_line_naming_its_room() -> None:
    assert servers.deployment("sglang") is sglang_room.DEPLOYMENT
    assert servers.deployment("vllm") is vllm_room.DEPLOYMENT
    assert servers.scenarios() == {
        "sglang": ("preempt", "prefix-cache", "transfer"),
        "vllm": ("preempt", "prefix-cache", "offload"),
    }


def test_an_unknown_server_is_refused_naming_the_table() -> None:
    with pytest.raises(InputError, match=r"^--server must be one of sglang, vllm, got 'trt'$"):
        run.prepare(run.ConsistencyOptions("llama-3.1-8b", shrink=True, server="trt"))


def test_a_scenario_is_refused_where_no_room_runs_it_naming_the_rooms_that_do() -> None:
    with pytest.raises(InputError, match=r"^--scenario offload runs on --server vllm only \(vLLM's Offloading"):
        run.prepare(run.ConsistencyOptions("llama-3.1-8b", shrink=True, scenario="offload"))
    with pytest.raises(
        InputError, match=r"^--scenario must be one of preempt, prefix-cache, offload, transfer, got 'x'$"
    ):
        scenarios.get("x")


def test_a_third_server_prepares_through_its_room_alone(third: ThirdServer) -> None:
    prepared = run.prepare(run.ConsistencyOptions("llama-3.1-8b", shrink=True, server="trt", scenario="prefix-cache"))
    assert prepared.prompts == [[5, 6]]
    assert third.calls == ["check", "check_extra_args", "check_model", "shrink", "stand_in", "bound"]
    with pytest.raises(InputError, match=r"^--scenario offload runs on --server vllm, trt only"):  # not sglang's
        run.prepare(run.ConsistencyOptions("llama-3.1-8b", shrink=True, server="sglang", scenario="offload"))


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def test_only_a_servers_room_reaches_into_its_engine_internals() -> None:
    reaching = {
        str(path.relative_to(PACKAGE)): sorted(i for i in _imports(path) if i.startswith(ENGINE_INTERNALS))
        for path in PACKAGE.rglob("*.py")
        if "servers" not in path.relative_to(PACKAGE).parts
    }
    assert {path: names for path, names in reaching.items() if names} == {}


def test_no_function_in_consistency_is_over_80_lines() -> None:
    long = [
        f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (node.end_lineno or 0) - node.lineno >= 80
    ]
    assert long == []
