"""The server seam, held (architecture §3.2): one per-server table per floor, no server's name branched on outside its
rooms, and a third server that reaches the commands through the tables alone.

1. **One table per floor.** Every module-level dict under ``kvdoctor/`` whose keys are server names (``"sglang"``,
   ``Server.VLLM``, ``Server.SGLANG.value``; ``Engine.KVDOCTOR`` may sit beside them) is one of the tables
   ``kvdoctor.core.server_tables.TABLES`` lists (``core.servers._FACTS``, ``engines._ADAPTERS``,
   ``consistency.servers.DEPLOYMENTS``, ``api._servers.SERVERS``, ``cli.render.RENDERERS``), and each of those has a
   line for every server that resolves.
2. **No branch on a server's name outside the rooms** (``kvdoctor.core.server_tables.ROOMS``: ``core/<s>/``,
   ``engines/<s>/``, ``consistency/servers/<s>/``, ``api/_*_<s>.py``, ``cli/render/<s>.py``): no comparison with a
   server's name (``== "sglang"``, ``is Server.VLLM``, ``in ("sglang", ...)``), no ``isinstance`` on a server's own
   class (one its room defines, or one named after it: ``VllmUsed``), no literal server as a default (a default is
   ``DEFAULT_SERVER``).
3. **A third server** ("toyserve", a real member of ``Server`` and ``Engine``) registered through the tables alone
   reaches ``--version``, ``inspect``, ``faults``, ``replay --list``, ``drift``, ``roundtrip`` and ``consistency
   --dry-run`` through the CLI.

``kvdoctor/core/`` and ``kvdoctor/consistency/`` are being reshaped (the fault, replay and consistency-fact rooms fold
into ``ServerFacts``; the consistency rooms take their modules): what they hold today is listed in the ``PENDING``
sets below. A ``PENDING`` entry that no longer matches fails too, so the lists only shrink; every other folder has none.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
from collections.abc import Collection, Iterator, Sequence
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

import kvdoctor
from kvdoctor._exceptions import InputError
from kvdoctor.api import _servers as api_servers
from kvdoctor.api._inspect import InspectJob
from kvdoctor.api._job import ErrorCase
from kvdoctor.cli import render
from kvdoctor.cli.app import app
from kvdoctor.cli.inspect_run import InspectRun
from kvdoctor.consistency import servers as consistency_servers
from kvdoctor.core import bugs, consistency_facts, faults, replays, server_tables, servers
from kvdoctor.core.cite import Cite
from kvdoctor.core.drift_result import CaseResult, DriftReport
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.core.launch_line import FlagVocabulary, LaunchLine, scan
from kvdoctor.core.record import record
from kvdoctor.core.registry import Hazard
from kvdoctor.core.servers import DEFAULT_SERVER, Server, ServerFacts
from kvdoctor.engines import Adapter, Engine, GpuArch, Inspected, RoundtripRun, load
from kvdoctor.engines.sglang._support import SUPPORTED

PACKAGE = Path(kvdoctor.__file__).parent
ROOT = PACKAGE.parent
SERVER_NAMES = tuple(s.value for s in Server)  # read at import: before any test registers a fake server
SERVER_MEMBERS = tuple(s.name for s in Server)

# ---- reading the package ----------------------------------------------------------------------------------------


@cache
def sources() -> dict[str, str]:
    """Every module of the package, by its path from the checkout's root (``kvdoctor/core/servers.py``)."""
    return {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in sorted(PACKAGE.rglob("*.py"))}


def _member(node: ast.expr) -> tuple[str, str] | None:
    """(enum, member) for ``Server.X``, ``Engine.X``, ``servers.Server.X`` and their ``.value``; else None."""
    text = ast.unparse(node)
    found = re.fullmatch(r"(?:\w+\.)*(Server|Engine)\.([A-Z_]+)(?:\.value)?", text)
    return (found[1], found[2]) if found else None


def names_a_server(node: ast.expr) -> bool:
    """NODE spells a server's name: ``"sglang"``, ``Server.VLLM``, ``Engine.SGLANG.value``..."""
    if isinstance(node, ast.Constant):
        return node.value in SERVER_NAMES
    member = _member(node)
    return member is not None and member[1] in SERVER_MEMBERS


def _names_kvdoctors_engine(node: ast.expr) -> bool:
    return (isinstance(node, ast.Constant) and node.value == "kvdoctor") or _member(node) == ("Engine", "KVDOCTOR")


def keyed_by_servers(node: ast.AST) -> bool:
    """NODE is a dict display (or ``dict(...)``) whose every key names a server (kvdoctor's own engine may sit beside
    them, as in the engines' table), at least one of them."""
    if isinstance(node, ast.Dict):
        keys = [k for k in node.keys if k is not None]  # a None key is a ** unpacking: not a table's own lines
        if not keys or len(keys) != len(node.keys):
            return False
        return any(names_a_server(k) for k in keys) and all(
            names_a_server(k) or _names_kvdoctors_engine(k) for k in keys
        )
    if isinstance(node, ast.Call) and ast.unparse(node.func) == "dict" and node.keywords:
        return all(k.arg in SERVER_NAMES for k in node.keywords)
    return False


def per_server_tables(source: str, path: str) -> list[str]:
    """``PATH:NAME`` of every module-level (or class-level) assignment in SOURCE whose value holds a dict keyed by
    server names."""
    found = []

    def assignments(body: list[ast.stmt], prefix: str) -> Iterator[tuple[str, ast.expr]]:
        for stmt in body:
            if isinstance(stmt, ast.Assign):
                yield ", ".join(prefix + ast.unparse(t) for t in stmt.targets), stmt.value
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                yield prefix + ast.unparse(stmt.target), stmt.value
            elif isinstance(stmt, ast.ClassDef):
                yield from assignments(stmt.body, f"{prefix}{stmt.name}.")

    for name, value in assignments(ast.parse(source).body, ""):
        if any(keyed_by_servers(node) for node in ast.walk(value)):
            found.append(f"{path}:{name}")
    return found


def room_pattern(room: str) -> re.Pattern[str]:
    """A room of ``server_tables.ROOMS`` (``core/<s>/``, ``api/_*_<s>.py``) as a pattern over module paths."""
    servers_ = "|".join(sorted(SERVER_NAMES))
    text = re.escape(f"kvdoctor/{room}").replace(re.escape("<s>"), f"(?:{servers_})").replace(r"\*", r"\w*")
    return re.compile(text if room.endswith("/") else f"{text}$")


ROOMS = tuple(room_pattern(r) for r in server_tables.ROOMS)


def in_a_room(path: str) -> bool:
    return any(r.match(path) for r in ROOMS)


def _module_of(path: str) -> str:
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


ROOM_MODULES = frozenset(_module_of(p) for p in sources() if in_a_room(p))
NAMED_AFTER_A_SERVER = re.compile(r"_?(Sglang|SGLang|Vllm|VLLM)[A-Z_]\w*")
# SGLang's MXFP8 scale rounding ("sglang", kvdoctor.choices.ScaleMode) is named after SGLang: a mode, not a server.
NOT_A_SERVER = ("scale_mode",)


def _scopes(tree: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    """Every node of TREE with the qualified name of the function or class it sits in (``<module>`` at the top)."""

    def walk(node: ast.AST, scope: str) -> Iterator[tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            yield scope, child
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                yield from walk(child, child.name if scope == "<module>" else f"{scope}.{child.name}")
            else:
                yield from walk(child, scope)

    yield from walk(tree, "<module>")


def _room_classes(tree: ast.AST) -> dict[str, bool]:
    """The names SOURCE binds to a room's module or to a name imported from one (True: the module itself)."""
    bound: dict[str, bool] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if f"{node.module}.{alias.name}" in ROOM_MODULES:
                    bound[alias.asname or alias.name] = True
                elif node.module in ROOM_MODULES:
                    bound[alias.asname or alias.name] = False
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in ROOM_MODULES:
                    bound[alias.asname or alias.name.split(".")[0]] = True
    return bound


def _server_class(node: ast.expr, bound: dict[str, bool]) -> bool:
    """NODE names a server's own class: one imported from its room, or one named after it."""
    text = ast.unparse(node)
    head, _, rest = text.partition(".")
    return (head in bound and (not bound[head] or bool(rest))) or bool(
        NAMED_AFTER_A_SERVER.fullmatch(text.split(".")[-1])
    )


def _not_a_server(*nodes: ast.AST) -> bool:
    return any(word in ast.unparse(n) for n in nodes for word in NOT_A_SERVER)


def server_branches(source: str, path: str) -> list[str]:
    """``PATH::SCOPE: CODE`` of each branch on a server's name in SOURCE: a comparison with one, an ``isinstance``
    on a server's own class, a literal server as a parameter's or a field's default or a lookup's fallback."""
    tree = ast.parse(source)
    bound = _room_classes(tree)
    found = []
    for scope, node in _scopes(tree):
        hit: ast.AST | None = None
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            spelled = [e for o in operands for e in (o.elts if isinstance(o, (ast.Tuple, ast.List, ast.Set)) else [o])]
            if any(names_a_server(e) for e in spelled) and not _not_a_server(*operands):
                hit = node
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("isinstance", "issubclass") and node.args:
            kinds = node.args[-1]
            if any(_server_class(k, bound) for k in (kinds.elts if isinstance(kinds, ast.Tuple) else [kinds])):
                hit = node
        elif isinstance(node, ast.Call) and (
            ast.unparse(node.func) == "getattr" or (isinstance(node.func, ast.Attribute) and node.func.attr == "get")
        ):
            if len(node.args) >= 2 and names_a_server(node.args[-1]):
                hit = node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            pairs = [*zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True)]
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
            qualname = node.name if scope == "<module>" else f"{scope}.{node.name}"
            for arg, default in pairs:
                if names_a_server(default) and arg.arg not in NOT_A_SERVER:
                    found.append(f"{path}::{qualname}: {arg.arg}={ast.unparse(default)}")
        elif isinstance(node, ast.AnnAssign) and node.value is not None and names_a_server(node.value):
            hit = None if _not_a_server(node.target) else node
        if hit is not None:
            found.append(f"{path}::{scope}: {ast.unparse(hit)}")
    return found


# ---- 1. one table per floor -------------------------------------------------------------------------------------

# Tables that fold into a floor's one table as kvdoctor/core/ and kvdoctor/consistency/ are reshaped (architecture
# §3.2), exactly today's; remove a line when its table goes (a line that no longer matches is a failure).
PENDING_TABLES = {
    "kvdoctor/core/faults.py:_ROOMS",  # -> ServerFacts names its room's faults module
    "kvdoctor/core/replays.py:_ROOMS",  # -> ServerFacts names its room's replays module
    "kvdoctor/core/consistency_facts.py:TABLE",  # -> ServerFacts names its room's consistency facts
    "kvdoctor/consistency/context_limit.py:LIMITS",  # -> a Deployment method (consistency.servers.DEPLOYMENTS)
}
FLOOR_TABLES = {f"{t.path}:{t.attribute}" for t in server_tables.TABLES}


def test_the_table_finder_finds_a_dict_keyed_by_server_names_and_nothing_else() -> None:
    source = (
        "from kvdoctor.core.servers import Server\n"
        "A = {'sglang': 'x', 'vllm': 'y'}\n"
        "B: dict[str, str] = {Server.SGLANG.value: 'x'}\n"
        "C = {Engine.KVDOCTOR: 'own', Engine.VLLM: 'v'}\n"
        "D = frozenset(dict(sglang=1, vllm=2).items())\n"
        "class K:\n"
        "    E = {Server.VLLM: 1}\n"
        "MODES = {'sglang': 0, 'rceil': 1}  # a scale mode named after SGLang, beside others: not a server table\n"
        "F = {'kvdoctor': 1}\n"
        "def f():\n"
        "    G = {'sglang': 1}\n"
    )
    assert per_server_tables(source, "m.py") == ["m.py:A", "m.py:B", "m.py:C", "m.py:D", "m.py:K.E"]


def test_every_per_server_table_is_its_floors_one_table() -> None:
    found = {t for path, source in sources().items() for t in per_server_tables(source, path)}
    assert found >= FLOOR_TABLES, f"a floor's table is no longer keyed by server names: {FLOOR_TABLES - found}"
    extra = sorted(found - FLOOR_TABLES - PENDING_TABLES)
    assert not extra, (
        "a per-server table that is not its floor's one table (kvdoctor.core.server_tables.TABLES): give its line "
        f"to the room's object instead: {extra}"
    )
    assert not PENDING_TABLES - found, f"PENDING_TABLES entries that are gone (remove them): {PENDING_TABLES - found}"


def test_only_core_and_consistency_have_pending_entries() -> None:
    for entry in (*PENDING_TABLES, *PENDING_BRANCHES):
        assert entry.startswith(("kvdoctor/core/", "kvdoctor/consistency/")), entry


def test_each_floors_table_has_a_line_for_every_server_that_resolves() -> None:
    assert [t.floor for t in server_tables.TABLES] == ["core", "engines", "consistency", "api", "cli"]
    for s in Server:
        assert servers.facts(s).server is s
        assert load(Engine(s.value)).server is s
        assert consistency_servers.deployment(s.value).scenarios
        room = api_servers.room(s)
        assert issubclass(room.inspect_job, InspectJob)  # type: ignore[arg-type]
        assert callable(room.drift_side.adapter) and callable(room.drift_side.all_architectures)
        assert callable(room.roundtrip_side.check)
        drawn = render.renderer(s)
        assert issubclass(drawn.inspect_run, InspectRun)
        assert callable(drawn.roundtrip_used) and callable(drawn.roundtrip_why)
    for table in server_tables.TABLES:  # one line per server (and kvdoctor's own engine in the engines' table)
        lines = vars(importlib.import_module(table.module))[table.attribute]
        engines_too = ("kvdoctor",) if table.floor == "engines" else ()
        assert sorted(getattr(k, "value", k) for k in lines) == sorted((*engines_too, *SERVER_NAMES)), table


def test_a_server_missing_from_a_table_fails_loudly_naming_it() -> None:
    with pytest.raises(KeyError, match="no API room for server 'toyserve'"):
        api_servers.room("toyserve")
    with pytest.raises(KeyError, match="no renderer for server 'toyserve'"):
        render.renderer("toyserve")


def test_the_engines_are_kvdoctors_and_one_per_server_each_with_its_supported_releases() -> None:
    assert [(e.name, e.value) for e in Engine] == [("KVDOCTOR", "kvdoctor"), *((s.name, s.value) for s in Server)]
    assert load(Engine.SGLANG).supported == SUPPORTED
    assert load(Engine.VLLM).supported is None  # driven at the release its rules restate
    assert load(Engine.KVDOCTOR).supported is None


@pytest.mark.parametrize("doc", ["README.md", "docs/design.md"])
def test_the_docs_third_server_recipe_is_generated_from_the_tables(doc: str) -> None:
    text = (ROOT / doc).read_text(encoding="utf-8")
    _, rest = text.split(server_tables.BEGIN)
    generated, _ = rest.split(server_tables.END)
    assert generated == server_tables.markdown(), f"{doc} is out of date: python -m kvdoctor.core.server_tables"


# ---- 2. no branch on a server's name outside the rooms ----------------------------------------------------------

# Branches in kvdoctor/core/ and kvdoctor/consistency/ that go as those floors are reshaped, exactly today's (path::
# scope: code); remove a line when its branch goes (a line that no longer matches is a failure).
PENDING_BRANCHES = {
    # core/drift_result.py: SGLang's and vLLM's drift cells, each tagged with its server, beside the shared report
    "kvdoctor/core/drift_result.py::SglangCaseResult: server: ClassVar[str] = 'sglang'",
    "kvdoctor/core/drift_result.py::VllmCaseResult: server: ClassVar[str] = 'vllm'",
    # consistency/bundle.py: SGLang's reproduction bundle, outside its room (-> servers/sglang/)
    "kvdoctor/consistency/bundle.py::check_destination: server='sglang'",
    "kvdoctor/consistency/bundle.py::check_destination: server != 'sglang'",
    "kvdoctor/consistency/bundle.py::why_not: result.server != 'sglang'",
    # consistency/: a literal "sglang" (or "vllm") default in the shared records and phases (-> DEFAULT_SERVER)
    "kvdoctor/consistency/report.py::engine_ref: server='sglang'",
    "kvdoctor/consistency/result.py::ConsistencyResult: server: str = 'sglang'",
    "kvdoctor/consistency/run.py::evaluate: server='sglang'",
    "kvdoctor/consistency/shrink.py::shrink: server='sglang'",
    "kvdoctor/consistency/shrink.py::small_mamba_state: server='vllm'",
    "kvdoctor/consistency/shrink.py::_shrink_one: server='sglang'",
}


def test_the_branch_finder_finds_each_kind_of_branch_and_nothing_else() -> None:
    source = (
        "from kvdoctor.core.sglang.inspect_result import InspectReport\n"
        "from kvdoctor.core import vllm\n"
        "from kvdoctor.roundtrip.result import VllmUsed, ModelUsed\n"
        "def f(server='sglang', *, engine=Server.VLLM, scale_mode='sglang', other=DEFAULT_SERVER):\n"
        "    if server == 'vllm' or engine is not Engine.SGLANG or server in ('sglang', 'x'):\n"
        "        return isinstance(server, (InspectReport, int)) or isinstance(server, VllmUsed)\n"
        "    if isinstance(server, vllm.analysis.VllmReport) or isinstance(server, ModelUsed):\n"
        "        return scale_mode == 'sglang' or server == DEFAULT_SERVER or getattr(server, 'x', 'vllm')\n"
        "class R:\n"
        "    server: str = 'sglang'\n"
        "    name: str = 'kvdoctor'\n"
    )
    assert server_branches(source, "m.py") == [
        "m.py::f: server='sglang'",
        "m.py::f: engine=Server.VLLM",
        "m.py::f: server == 'vllm'",
        "m.py::f: engine is not Engine.SGLANG",
        "m.py::f: server in ('sglang', 'x')",
        "m.py::f: isinstance(server, (InspectReport, int))",
        "m.py::f: isinstance(server, VllmUsed)",
        "m.py::f: isinstance(server, vllm.analysis.VllmReport)",
        "m.py::f: getattr(server, 'x', 'vllm')",
        "m.py::R: server: str = 'sglang'",
    ]


def test_the_rooms_are_each_floors_server_modules() -> None:
    rooms = {p for p in sources() if in_a_room(p)}
    assert {"kvdoctor/core/sglang/server.py", "kvdoctor/engines/vllm/__init__.py"} <= rooms
    assert {"kvdoctor/api/_inspect_sglang.py", "kvdoctor/api/_server_vllm.py", "kvdoctor/cli/render/sglang.py"} <= rooms
    assert "kvdoctor/consistency/servers/vllm/deployment.py" in rooms
    shared = {"kvdoctor/api/_servers.py", "kvdoctor/cli/render/__init__.py", "kvdoctor/engines/__init__.py"}
    assert not rooms & shared


def test_no_code_outside_the_rooms_branches_on_a_servers_name() -> None:
    found = {b for path, source in sources().items() if not in_a_room(path) for b in server_branches(source, path)}
    extra = sorted(found - PENDING_BRANCHES)
    assert not extra, (
        "a branch on a server's name outside its rooms: read the floor's table (kvdoctor.core.server_tables) or move "
        "the code into the room; a default is DEFAULT_SERVER:\n  " + "\n  ".join(extra)
    )
    assert not PENDING_BRANCHES - found, (
        f"PENDING_BRANCHES entries that are gone (remove them): {PENDING_BRANCHES - found}"
    )


# ---- 3. a third server, through the tables alone ---------------------------------------------------------------

HERE = __name__  # this module, as the tables' "module:attribute" lines name it
TOY = "toyserve"

VOCABULARY = FlagVocabulary(
    label="ToyServe flags",
    server="ToyServe",
    flag_kind="a ToyServe flag",
    known=frozenset({"--toy-window"}),
    switches=frozenset(),
    multi_value=frozenset(),
    optional_value=frozenset(),
)


@record(frozen=True)
class ToyReport:
    """What the toy rule model answers: the model, the window it was launched with, and one warning."""

    model: str
    window: str
    hazards: tuple[Hazard, ...]
    rules_revision: str = "toyserve==1.0"


class ToyRules:
    """core/toyserve/: the toy's rule model (``RuleModel``): every model evicts at its window."""

    def analyze(self, model: str, argv: Sequence[str], **settings: Any) -> ToyReport:
        window = dict(zip(argv[::2], argv[1::2], strict=True)).get("--toy-window", "8")
        return ToyReport(model, window, (Hazard("warning", "KVT001", f"{model} evicts at {window} tokens"),))

    def vocabulary(self) -> FlagVocabulary:
        return VOCABULARY

    def launch_line(self, words: Sequence[str], own_options: Collection[str]) -> LaunchLine:
        found = scan(words, VOCABULARY, own_options)
        return LaunchLine(found.positionals[0], tuple(w for o in found.options for w in o.argv))


RULES = ToyRules()


# ---- engines/toyserve/: the installed toy's answers -----------------------------------------------------------


@record(frozen=True)
class ToyFieldDrift:
    field: str
    kvdoctor: Any
    toyserve: Any  # the server's side, under its own name (``drift_result.server_answer``)


@record
class ToyCaseResult(CaseResult):
    server: ClassVar[str] = TOY

    toyserve_refusal: str | None = None
    seconds: float = 0.0


@record(frozen=True)
class ToyUsed:
    """What a round trip on the toy's pools used."""

    model: str
    evicted: int


class ToyAdapter(Adapter):
    """engines/toyserve/: ``engine`` and ``server`` are the members the fixture makes."""

    title = "ToyServe"
    supported = ("0.9", "1.0")  # the releases --engine toyserve drives

    def info(self) -> EngineRef:
        return EngineRef(TOY, "1.0", "/opt/toyserve")

    def drift(self, fixtures: Sequence[str], cases: Sequence[str], arch: GpuArch, progress: Any) -> DriftReport:
        cells = [
            ToyCaseResult("toy-model", "default", (), 3),
            ToyCaseResult("toy-model", "window-4", ("--toy-window", "4"), 3, [ToyFieldDrift("window", 4, 8)]),
        ]
        return DriftReport(self.info(), cells, 0.5, gpu_arch=None)

    def roundtrip(
        self, model: str, server_argv: Sequence[str], options: Any, *, arch: GpuArch, emulate_d2h: bool
    ) -> RoundtripRun:
        from kvdoctor.roundtrip.result import ComponentCheck, RoundtripResult

        def run(progress: Any) -> RoundtripResult:
            row = ComponentCheck("window", 64, 0, True, 1, 1, 64, 64, True, None, None, None, None, None, True)
            used = ToyUsed(
                model, evicted=int(dict(zip(server_argv[::2], server_argv[1::2], strict=True))["--toy-window"])
            )
            return RoundtripResult.of(
                device=options.device, kv_cache_dtype="auto", backend="toy", injected=None, components=[row],
                used=used, expected_red=[], hazards=[], elapsed_s=0.1, engine=self.info(),  # type: ignore[arg-type]
            )  # fmt: skip

        return run


ADAPTER = ToyAdapter()


# ---- api/_server_toyserve.py and cli/render/toyserve.py ------------------------------------------------------


class ToyInspectJob(InspectJob):
    """``inspect --server toyserve``: the toy's launch line and rule model."""

    def error_case(self) -> ErrorCase:
        return ErrorCase("kvdoctor.inspect", f"kvdoctor inspect --server {TOY} {self.model}", self.junit_path)

    def work(self) -> Inspected:
        rules = servers.rule_model(self.server)
        line = rules.launch_line(self.words(), self.own_options)
        self.title = f"kvdoctor inspect --server {TOY} {line.model}"
        return Inspected(rules.analyze(line.model, line.server_argv))


class ToyDriftSide:
    def adapter(self) -> Adapter:
        return load(Engine(TOY))

    def all_architectures(self, *args: Any, **kwargs: Any) -> DriftReport:
        raise InputError("ToyServe's registry serves no generated set")


class ToyRoundtripSide:
    def check(self, run: api_servers.RoundtripAsk) -> None:
        if run.engine.value != TOY:
            raise InputError(f"roundtrip --server {TOY} runs ToyServe's own pools: add --engine {TOY}")


TOY_API = api_servers.ServerApi(inspect_job=ToyInspectJob, drift_side=ToyDriftSide(), roundtrip_side=ToyRoundtripSide())


class ToyInspectRun(InspectRun):
    def render(self, report: ToyReport, console: Any) -> None:
        told = servers.facts(TOY)
        console.print(f"{told.title} {report.model}: {told.plural()} at {report.window}")


TOY_RENDERER = render.Renderer(
    inspect_run=ToyInspectRun,
    roundtrip_used=lambda result: [("evicted", result.used.evicted)],
    roundtrip_why=lambda row, result: f"{row.name} was evicted",
)

# ---- core/toyserve/faults.py and replays.py: a fault and the case replaying it -----------------------------------

REPLAYS: tuple[replays.Replay, ...] = ()  # made with the members, in the fixture
PENDING: tuple[replays.Replay, ...] = ()


class ToyDeployment:
    """consistency/servers/toyserve/: the toy launches the way SGLang does (its room borrows SGLang's plan)."""

    def __init__(self) -> None:
        from kvdoctor.consistency.servers.sglang import deployment as sglang_room

        self.sglang = sglang_room.DEPLOYMENT
        self.scenarios = self.sglang.scenarios

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sglang, name)


@pytest.fixture
def toyserve(monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    """A real Server member ``toyserve`` and one line in each table; all taken back after the test."""
    member = servers.new_server(TOY)
    engine = None
    try:
        servers.register(
            ServerFacts(
                server=member,
                title="ToyServe",
                rules_version="1.0",
                rules_revision="toyserve==1.0",
                noun="eviction",
                distributions=("toyserve",),
                rule_model=f"{HERE}:RULES",
            )
        )
        engine = kvdoctor.engines.register(member, HERE)  # its Engine member, made from its Server member
        monkeypatch.setattr(ToyAdapter, "engine", engine, raising=False)
        monkeypatch.setattr(ToyAdapter, "server", member, raising=False)
        monkeypatch.setitem(api_servers.SERVERS, member, f"{HERE}:TOY_API")
        monkeypatch.setitem(render.RENDERERS, member, f"{HERE}:TOY_RENDERER")
        monkeypatch.setitem(consistency_servers.DEPLOYMENTS, TOY, f"{HERE}:DEPLOYMENT")
        monkeypatch.setitem(globals(), "DEPLOYMENT", ToyDeployment())
        # The tables still to fold into ServerFacts (PENDING_TABLES): one line each too, while they last.
        fault = faults.Fault(
            "toy-evict-early", TOY, faults.Target.MODEL, faults.StatePath.SLIDING_WINDOW, faults.Role.ANY,
            (Cite(TOY, "cache.py", "evict", 1, 9),), "evicts a window early", faults.Needs.SWA, replays=("toy#1",),
        )  # fmt: skip
        monkeypatch.setitem(faults._REGISTERED, TOY, (fault,))
        expect = replays.Expect(replays.Outcome.RED)
        case = replays.Replay("toy#1", TOY, "toy-model", "in-process", "roundtrip", fault.name, expect)
        monkeypatch.setitem(globals(), "REPLAYS", (case,))
        bug = replace(bugs.get("kvdoctor#overlap"), id="toy#1", row=None, title="a window evicted early", server=TOY)
        monkeypatch.setattr(bugs, "BUGS", (*bugs.BUGS, bug))  # the public bug it replays (a bug, not a server table)
        monkeypatch.setitem(replays._ROOMS, TOY, HERE)
        monkeypatch.setitem(consistency_facts.TABLE, TOY, consistency_facts.TABLE[Server.SGLANG.value])
        _clear_caches()
        yield member
    finally:
        monkeypatch.undo()
        if engine is not None:
            kvdoctor.engines.unregister(engine)
        servers.unregister(member)
        _clear_caches()


def _clear_caches() -> None:
    for cached in (faults.faults, replays.replays, replays.pending):
        cached.cache_clear()


def _kvdoctor(*argv: str) -> Any:
    return CliRunner().invoke(app, list(argv), env={"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb"})


def test_the_fake_is_a_real_member_of_server_and_engine_and_is_taken_back(toyserve: Server) -> None:
    assert Server(TOY) is toyserve and toyserve in list(Server) and Engine(TOY).value == TOY
    assert servers.servers()[-1] == TOY
    out = _kvdoctor("inspect", "--help")
    assert "toyserve" in out.output  # --server's choices, built from Server


def test_taken_back_after_the_test() -> None:
    assert [s.value for s in Server] == ["sglang", "vllm"] and [e.value for e in Engine] == ["kvdoctor", *SERVER_NAMES]
    assert servers.servers() == ("sglang", "vllm") and DEFAULT_SERVER is Server.SGLANG


def test_version_lists_the_fake_and_the_releases_its_engine_drives(
    toyserve: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = tmp_path / "toyserve-0.9.dist-info"  # installed: its metadata and nothing else
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toyserve\nVersion: 0.9\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = _kvdoctor("--version")
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[-1] == "ToyServe 0.9 (differs from the rules' 1.0; --engine toyserve drives 0.9 to 1.0)"
    assert [line.split()[0].rstrip(":") for line in lines[1:]] == ["SGLang", "vLLM", "ToyServe"]


def test_inspect_reaches_the_fakes_job_rule_model_and_renderer(toyserve: Server) -> None:
    out = _kvdoctor("inspect", "toy-model", "--server", TOY, "--toy-window", "4")
    assert out.exit_code == 0, out.output
    assert "ToyServe toy-model: evictions at 4" in out.output  # its renderer, its facts' noun
    assert out.output.rstrip().endswith("verdict: passed with warnings — no error hazards; 1 warning")
    out = _kvdoctor("inspect", "toy-model", "--server", TOY, "--json")
    document = json.loads(out.output)
    assert document["rules_revision"] == "toyserve==1.0" and document["window"] == "8"
    out = _kvdoctor("inspect", "toy-model", "--server", TOY, "--page-size", "16")
    assert out.exit_code == 2 and "neither kvdoctor's nor a ToyServe flag" in out.output, out.output  # its vocabulary


def test_faults_lists_the_fakes_records(toyserve: Server) -> None:
    out = _kvdoctor("faults", "--server", TOY)
    assert out.exit_code == 0, out.output
    assert "ToyServe: kvdoctor roundtrip --inject" in out.output and "toy-evict-early" in out.output
    document = json.loads(_kvdoctor("faults", "--server", TOY, "--json").output)
    assert [f["name"] for f in document["faults"]] == ["toy-evict-early"]


def test_replay_list_lists_the_fakes_case(toyserve: Server) -> None:
    out = _kvdoctor("replay", "--list", "--json")
    assert out.exit_code == 0, out.output
    cases = json.loads(out.output)["cases"]
    assert cases[-1]["bug"] == "toy#1" and cases[-1]["server"] == TOY
    assert "toy#1" in _kvdoctor("replay", "--list").output


def test_drift_reaches_the_fakes_side_title_and_engine(toyserve: Server) -> None:
    out = _kvdoctor("drift", "--server", TOY)
    assert out.exit_code == 1, out.output  # one cell drifts
    assert "kvdoctor rules vs ToyServe 1.0 (/opt/toyserve)" in out.output
    assert "ToyServe" in out.output.split("toy-model · window-4")[1]  # its column, named by its facts
    document = json.loads(_kvdoctor("drift", "--server", TOY, "--json").output)
    assert document["rules_revision"] == "toyserve==1.0"
    assert document["results"][1]["drift"] == [{"field": "window", "kvdoctor": 4, "toyserve": 8}]
    out = _kvdoctor("drift", "--server", TOY, "--gpu-arch", "sm90")  # its facts: its rules take no platform
    assert out.exit_code == 2 and "drift --server toyserve compares answers that take none" in out.output, out.output


def test_roundtrip_reaches_the_fakes_side_engine_and_renderer(toyserve: Server) -> None:
    out = _kvdoctor("roundtrip", "toy-model", "--server", TOY, "--toy-window", "4")
    assert out.exit_code == 2 and "add --engine toyserve" in out.output, out.output  # its side's check
    out = _kvdoctor("roundtrip", "toy-model", "--server", TOY, "--engine", TOY, "--toy-window", "4", "--device", "cpu")
    assert out.exit_code == 0, out.output
    assert "evicted" in out.output and "toyserve 1.0 from /opt/toyserve" in out.output
    document = json.loads(
        _kvdoctor("roundtrip", "toy-model", "--server", TOY, "--engine", TOY, "--toy-window", "4", "--json").output
    )
    assert document["used"] == {"model": "toy-model", "evicted": 4} and document["verdict"] == "pass"


def test_consistency_dry_run_reaches_the_fakes_deployment(toyserve: Server) -> None:
    out = _kvdoctor("consistency", "llama-3.1-8b", "--server", TOY, "--shrink", "--dry-run")
    assert out.exit_code == 0, out.output
    assert "# 1. reference" in out.output and "# 2. pressured" in out.output  # its room's plan (SGLang's, borrowed)
