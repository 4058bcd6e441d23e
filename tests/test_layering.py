"""The package's layers, read from every import statement under kvdoctor/ (lazy imports included).

Floors, lowest first, one per folder: the error tree, text helpers and the options' enums (``choices``) ·
``core`` (pure rules, no torch) · ``roundtrip`` (the torch-free contract ``state`` and the engines return) ·
``mxfp8`` · ``state`` (data on torch) · ``report`` · ``schemas`` · ``engines`` (the only door into a server) ·
``deploy`` (processes, signals, ports, HTTP, plans) · ``consistency`` · ``pd`` (pd-eval) · ``replay`` · ``sweep`` ·
``bench`` · ``api`` (the public Python API) · ``testing`` (its pytest plugin) · ``cli`` · ``__main__``. An import may
stay on its floor or go down, never up. Neither ``core`` nor ``roundtrip`` imports torch, triton, pandas or httpx.
Inside ``core``, the modules shared by both servers (directly under ``core/``) import neither server's
room, and ``core/sglang`` and ``core/vllm`` do not import each other. Only ``engines/`` imports SGLang or
vLLM. No two modules import each other, however indirectly.

The graph is read with ``ast`` from every ``import`` at any depth (function bodies, ``TYPE_CHECKING``
blocks, ``try`` blocks), so an arrow cannot hide behind a lazy import: a cycle that works only because
one side imports late breaks the day someone moves that import to the top. Each known exception is an
explicit entry of ``ALLOWANCES``, naming the file that owns it; an entry that no longer matches an import
fails too, so the list only shrinks.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

import kvdoctor

PACKAGE = Path(kvdoctor.__file__).parent

# Each module's floor, by its longest dotted prefix here (``kvdoctor`` alone is the package's __init__).
FLOORS: dict[str, int] = {
    "kvdoctor": 0,
    "kvdoctor._exceptions": 0,
    "kvdoctor.text": 0,
    "kvdoctor.choices": 0,
    "kvdoctor.core": 1,
    "kvdoctor.roundtrip": 2,  # the torch-free contract state/ and the engines return
    "kvdoctor.mxfp8": 3,
    "kvdoctor.state": 4,
    "kvdoctor.report": 5,
    "kvdoctor.schemas": 6,
    "kvdoctor.engines": 7,
    "kvdoctor.deploy": 8,  # what both real-server checks stand on: processes, signals, ports, HTTP, plans
    "kvdoctor.consistency": 9,
    "kvdoctor.pd": 10,  # pd-eval, whose token oracle is consistency's
    "kvdoctor.replay": 11,  # public bugs replayed: consistency's runs, the engine round trip, judged per bug
    "kvdoctor.sweep": 12,  # a server's configuration space searched: consistency's runs over a covering array
    "kvdoctor.bench": 13,
    "kvdoctor.api": 14,  # the public Python API: each command's job, without a terminal
    "kvdoctor.testing": 15,  # the pytest plugin, a caller of the API
    "kvdoctor.cli": 16,
    "kvdoctor.__main__": 17,
}
HEAVY = frozenset({"torch", "triton", "pandas", "httpx"})  # none of them in core, roundtrip
TORCH_FREE = ("kvdoctor.core", "kvdoctor.roundtrip")
SERVERS = frozenset({"sglang", "vllm", "sgl_kernel"})  # the servers' own packages: engines/ only
ROOMS = ("kvdoctor.core.sglang", "kvdoctor.core.vllm")

# Known arrows that break a rule below, each owned by the file that makes it. Remove an entry when its
# import goes; a new arrow the wrong way is a failure, not a new entry.
ALLOWANCES: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    importer: str
    target: str  # the module named: a kvdoctor module where one is named, else the dotted name as written
    line: int

    @property
    def top(self) -> str:
        return self.target.partition(".")[0]

    def __str__(self) -> str:
        return f"{self.importer} -> {self.target} ({module_path(self.importer)}:{self.line})"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def module_path(name: str) -> str:
    path = modules().get(name)
    return str(path.relative_to(PACKAGE.parent)) if path else name


def imports_in(source: str, importer: str, *, is_package: bool, known: Iterable[str]) -> Iterator[Import]:
    """Every import statement of SOURCE (the module IMPORTER), wherever it sits, as the module it names.

    ``from a.b import c`` names ``a.b.c`` when that is a module of KNOWN, else ``a.b``; relative imports
    are resolved against IMPORTER (a package's own ``__init__`` when IS_PACKAGE)."""
    known = frozenset(known)
    package = importer if is_package else importer.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(importer, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                named = f"{base}.{alias.name}"
                yield Import(importer, named if named in known else base, node.lineno)


@cache
def all_imports() -> tuple[Import, ...]:
    found: list[Import] = []
    for name, path in modules().items():
        source = path.read_text(encoding="utf-8")
        found += imports_in(source, name, is_package=path.name == "__init__.py", known=modules())
    return tuple(found)


def edges() -> list[Import]:
    """Imports of one kvdoctor module by another, the allowances left out."""
    return [
        i
        for i in all_imports()
        if i.target in modules() and i.target != i.importer and (i.importer, i.target) not in ALLOWANCES
    ]


def floor(name: str) -> int | None:
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in FLOORS and (n > 1 or name == "kvdoctor"):
            return FLOORS[prefix]
    return None


def inside(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def report(what: str, found: Iterable[object]) -> None:
    lines = sorted({str(f) for f in found})
    if lines:
        pytest.fail(f"{what}:\n  " + "\n  ".join(lines), pytrace=False)


def test_the_reader_sees_lazy_type_checking_and_relative_imports() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import kvdoctor.text\n"
        "if TYPE_CHECKING:\n"
        "    from kvdoctor.core.config import ModelConfig\n"
        "def f():\n"
        "    from kvdoctor.core import launch_line\n"
        "    try:\n"
        "        import torch\n"
        "    except ImportError:\n"
        "        pass\n"
        "from . import spec\n"
        "from .. import config_checks\n"
    )
    known = {"kvdoctor.text", "kvdoctor.core.config", "kvdoctor.core.launch_line", "kvdoctor.core.sglang.spec"}
    known |= {"kvdoctor.core.config_checks"}
    found = {(i.target, i.line) for i in imports_in(source, "kvdoctor.core.sglang.x", is_package=False, known=known)}
    assert found == {
        ("typing", 1),
        ("kvdoctor.text", 2),
        ("kvdoctor.core.config", 4),  # a name imported from a module is an arrow to the module
        ("kvdoctor.core.launch_line", 6),  # a module imported from its package is an arrow to the module
        ("torch", 8),
        ("kvdoctor.core.sglang.spec", 11),
        ("kvdoctor.core.config_checks", 12),
    }
    assert len(modules()) > 100 and "kvdoctor.core.launch_line" in modules()  # the whole package is read


def test_every_module_stands_on_a_floor() -> None:
    report("modules on no floor (add their package to FLOORS)", (m for m in modules() if floor(m) is None))


def test_core_and_the_roundtrip_contract_import_no_heavy_library() -> None:
    report(
        "kvdoctor.core or kvdoctor.roundtrip imports torch, triton, pandas or httpx",
        (i for i in all_imports() if any(inside(i.importer, t) for t in TORCH_FREE) and i.top in HEAVY),
    )


def test_core_imports_nothing_above_it() -> None:
    upstairs = ("engines", "cli", "state", "pd", "replay", "report", "bench", "consistency", "mxfp8", "roundtrip")
    report(
        "kvdoctor.core imports a package above it",
        (
            i
            for i in edges()
            if inside(i.importer, "kvdoctor.core") and any(inside(i.target, f"kvdoctor.{p}") for p in upstairs)
        ),
    )


def test_shared_core_modules_import_neither_server_room() -> None:
    shared = {m for m in modules() if inside(m, "kvdoctor.core") and not any(inside(m, r) for r in ROOMS)}
    report(
        "a module shared by both servers (directly under kvdoctor/core/) imports a server's room",
        (i for i in edges() if i.importer in shared and any(inside(i.target, r) for r in ROOMS)),
    )


def test_the_server_rooms_do_not_import_each_other() -> None:
    sglang, vllm = ROOMS
    report(
        "core/sglang and core/vllm import each other",
        (
            i
            for i in edges()
            if (inside(i.importer, sglang) and inside(i.target, vllm))
            or (inside(i.importer, vllm) and inside(i.target, sglang))
        ),
    )


def test_only_engines_import_the_servers() -> None:
    report(
        "a module outside kvdoctor/engines/ imports SGLang or vLLM",
        (i for i in all_imports() if i.top in SERVERS and not inside(i.importer, "kvdoctor.engines")),
    )


def test_the_floors_point_one_way() -> None:
    report(
        "an import goes up a floor (core -> state/mxfp8 -> pd/report/bench/consistency/engines -> cli)",
        (i for i in edges() if (floor(i.target) or 0) > (floor(i.importer) or 0)),
    )


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of GRAPH with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_lazy_imports_included() -> None:
    graph: dict[str, set[str]] = {m: set() for m in modules()}
    for i in edges():
        graph[i.importer].add(i.target)
    cycles = _cycles(graph)
    report(
        "modules that import each other (directly or through others; each arrow of the cycle listed)",
        (i for c in cycles for i in edges() if i.importer in c and i.target in c),
    )


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_every_allowance_is_still_an_import() -> None:
    present = {(i.importer, i.target) for i in all_imports()}
    stale = (a for a in ALLOWANCES if a not in present)
    report("ALLOWANCES entries that no longer match an import (remove them)", stale)


PD_MODULES = sorted(
    m for m in modules() if any(inside(m, p) for p in ("kvdoctor.pd", "kvdoctor.deploy")) and m not in FLOORS
)


@pytest.mark.parametrize("module", PD_MODULES)
def test_each_pd_module_imports_alone_in_a_fresh_interpreter(module: str) -> None:
    # No module may depend on another having been imported first (a hidden order a lazy import can mask).
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
