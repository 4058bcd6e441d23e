"""A third server is its facts and one line in each table, nothing else edited (issue 29).

"toyserve" is registered here through the seam alone: its facts (``core.servers.register``), a rule model
and a flag vocabulary in this module, and one line in each command's per-server table (``inspect``'s
``RUNS``, ``drift``'s ``SIDES``, ``roundtrip``'s ``SIDES``, ``--version``'s ``ENGINE_RANGES``). Then
``kvdoctor --version`` lists it and ``inspect``, ``drift`` and ``roundtrip`` reach its rule model, its
tables and its checks without one line of kvdoctor knowing its name. The real CLI's ``--server`` choices
stay SGLang's and vLLM's.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
import typer
from typer.testing import CliRunner

from kvdoctor._exceptions import InputError
from kvdoctor.api import _drift as api_drift
from kvdoctor.api import _inspect as api_inspect
from kvdoctor.api import _roundtrip as api_roundtrip
from kvdoctor.api._inspect import InspectJob
from kvdoctor.api._job import ErrorCase
from kvdoctor.api._roundtrip import RoundtripJob
from kvdoctor.cli import drift, inspect_cmd, roundtrip, versions
from kvdoctor.cli.app import PASSTHROUGH, app
from kvdoctor.cli.inspect_run import InspectRun
from kvdoctor.core import servers
from kvdoctor.core.drift_result import CaseResult, DriftReport
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.core.launch_line import FlagVocabulary, LaunchLine, scan
from kvdoctor.core.record import record
from kvdoctor.core.registry import Hazard
from kvdoctor.core.servers import Server, ServerFacts
from kvdoctor.engines import Adapter, Engine, GpuArch, Inspected

TOY = "toyserve"
HERE = __name__  # this module, as the tables' "module:attribute" lines name it

# ---- core/toyserve/: its facts, flag vocabulary and rule model ---------------------------------------------

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
    """The toy's rule model (``RuleModel``): every model evicts at its window."""

    asked: ClassVar[list[tuple[str, tuple[str, ...]]]] = []

    def analyze(self, model: str, argv: Sequence[str], **settings: Any) -> ToyReport:
        self.asked.append((model, tuple(argv)))
        window = dict(zip(argv[::2], argv[1::2], strict=True)).get("--toy-window", "8")
        hazard = Hazard("warning", "KVT001", f"{model} evicts at {window} tokens")
        return ToyReport(model, window, (hazard,))

    def vocabulary(self) -> FlagVocabulary:
        return VOCABULARY

    def launch_line(self, words: Sequence[str], own_options: Collection[str]) -> LaunchLine:
        found = scan(words, VOCABULARY, own_options)
        return LaunchLine(found.positionals[0], tuple(w for o in found.options for w in o.argv))


RULES = ToyRules()
FACTS = ServerFacts(
    server=TOY,  # a registered server is its name: the CLI's Server enum (its --server choices) stays as it is
    title="ToyServe",
    rules_version="1.0",
    rules_revision="toyserve==1.0",
    noun="eviction",
    distributions=("toyserve",),
    rule_model=f"{HERE}:RULES",
)
TOY_RANGE = ("0.9", "1.0")  # the versions --engine toyserve drives

# ---- its answer (api/_inspect_toyserve.py) and renderer (cli/inspect_toyserve.py) -----------------------------


class ToyInspectJob(InspectJob):
    """``inspect --server toyserve`` (api/_inspect_toyserve.py): the toy's launch line and rule model."""

    def error_case(self) -> ErrorCase:
        return ErrorCase("kvdoctor.inspect", f"kvdoctor inspect --server {TOY} {self.model}", self.junit_path)

    def work(self) -> Inspected:
        rules = servers.rule_model(TOY)
        line = rules.launch_line(self.words(), ("--json",))
        self.title = f"kvdoctor inspect --server {TOY} {line.model}"
        return Inspected(rules.analyze(line.model, line.server_argv))


class ToyInspectRun(InspectRun):
    """``inspect --server toyserve``'s tables (cli/inspect_toyserve.py), through the seam."""

    def render(self, report: ToyReport, console: Any) -> None:
        console.print(f"{servers.facts(TOY).title} {report.model}: {servers.facts(TOY).plural()} at {report.window}")


# ---- engines/toyserve/: the installed toy's answers for drift ------------------------------------------------


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


class ToyAdapter(Adapter):
    engine = Engine.KVDOCTOR  # the Engine enum is the engine axis's table; the toy stands beside it here
    title = "ToyServe"
    server = None

    def drift(self, fixtures: Sequence[str], cases: Sequence[str], arch: GpuArch, progress: Any) -> DriftReport:
        cells = [
            ToyCaseResult("toy-model", "default", (), 3),
            ToyCaseResult("toy-model", "window-4", ("--toy-window", "4"), 3, [ToyFieldDrift("window", 4, 8)]),
            ToyCaseResult(
                "toy-model",
                "window-0",
                ("--toy-window", "0"),
                1,
                [ToyFieldDrift("refused", False, True)],
                None,
                "window must be > 0",
            ),
        ]
        return DriftReport(EngineRef(TOY, "1.0", "/opt/toyserve"), cells, 0.5, gpu_arch=None)


class ToyDriftSide:
    """``drift --server toyserve``'s side (``api._drift_sides.DriftSide``)."""

    def adapter(self) -> Adapter:
        return ToyAdapter()

    def all_architectures(self, *args: Any, **kwargs: Any) -> DriftReport:
        raise AssertionError("not asked here")


TOY_DRIFT = ToyDriftSide()


class ToyRoundtripSide:
    """``roundtrip --server toyserve``'s checks (``api._roundtrip_sides.RoundtripSide``): it injects no fault."""

    def check(self, run: RoundtripJob) -> None:
        if run.settings["inject"] is not None:
            raise InputError(f"--inject {run.settings['inject']}: ToyServe's round trip injects no fault")


TOY_ROUNDTRIP = ToyRoundtripSide()


# ---- registered through the tables alone ----------------------------------------------------------------------


@pytest.fixture
def toyserve(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The toy's facts and one line in each table; all taken back after the test."""
    servers.register(FACTS)
    monkeypatch.setitem(inspect_cmd.RUNS, TOY, f"{HERE}:ToyInspectRun")
    monkeypatch.setitem(api_inspect.JOBS, TOY, f"{HERE}:ToyInspectJob")
    monkeypatch.setitem(api_drift.SIDES, TOY, f"{HERE}:TOY_DRIFT")
    monkeypatch.setitem(api_roundtrip.SIDES, TOY, f"{HERE}:TOY_ROUNDTRIP")
    monkeypatch.setitem(versions.ENGINE_RANGES, TOY, f"{HERE}:TOY_RANGE")
    ToyRules.asked.clear()
    yield
    servers.unregister(TOY)


def _context(command: Any, words: list[str]) -> typer.Context:
    """A context as click makes one for COMMAND's words (what a command reads its launch line from)."""
    one = typer.Typer()
    one.command(context_settings=PASSTHROUGH)(command)
    return typer.main.get_command(one).make_context(command.__name__, words)


def test_version_lists_the_registered_server_from_its_facts(
    toyserve: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert versions.version_lines()[-1] == "ToyServe: not installed (kvdoctor's rules: 1.0)"
    info = tmp_path / "toyserve-0.9.dist-info"  # installed: its metadata and nothing else
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toyserve\nVersion: 0.9\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = CliRunner().invoke(app, ["--version"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[-1] == "ToyServe 0.9 (differs from the rules' 1.0; --engine toyserve drives 0.9 to 1.0)"
    assert [line.split()[0].rstrip(":") for line in lines[1:]] == ["SGLang", "vLLM", "ToyServe"]


def test_inspect_reaches_the_servers_run_and_rule_model_through_its_table(
    toyserve: None, capsys: pytest.CaptureFixture[str]
) -> None:
    ctx = _context(inspect_cmd.inspect, ["toy-model", "--toy-window", "4"])
    options: dict[str, Any] = dict(strict=False, request_tokens=2048, concurrent=128, junit_path=None)
    options |= dict(engine=Engine.KVDOCTOR, gpu_arch=GpuArch.SM100, server=TOY)  # TOY: no --server choice names it
    with ctx:
        inspect_cmd.inspect(ctx, "toy-model", json_output=False, **options)
    out = capsys.readouterr().out
    assert ToyRules.asked == [("toy-model", ("--toy-window", "4"))]  # its launch line, read by its vocabulary
    assert "ToyServe toy-model: evictions at 4" in out  # its renderer
    assert out.rstrip().endswith("verdict: passed with warnings — no error hazards; 1 warning")

    with ctx:
        inspect_cmd.inspect(ctx, "toy-model", json_output=True, **options)
    document = json.loads(capsys.readouterr().out)
    assert document["rules_revision"] == "toyserve==1.0" and document["window"] == "4"


def test_drift_reaches_the_servers_side_title_and_revision_through_the_tables(
    toyserve: None, capsys: pytest.CaptureFixture[str]
) -> None:
    run = dict(json_output=False, junit_path=None, server=TOY)
    with pytest.raises(typer.Exit) as exited:
        drift.DriftRun((), (), GpuArch.SM100, **run)()  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert exited.value.exit_code == 1  # two cells drift
    assert "kvdoctor rules vs ToyServe 1.0 (/opt/toyserve)" in out
    assert "ToyServe refuses: window must be > 0" in out
    assert "window" in out and "ToyServe" in out.split("toy-model · window-4")[1]  # its column, named by its facts

    with pytest.raises(typer.Exit):
        drift.DriftRun((), (), GpuArch.SM100, **{**run, "json_output": True})()  # type: ignore[arg-type]
    document = json.loads(capsys.readouterr().out)
    assert document["rules_revision"] == "toyserve==1.0"
    assert document["results"][1]["drift"] == [{"field": "window", "kvdoctor": 4, "toyserve": 8}]

    # Its rules take no GPU platform (its facts say so): --gpu-arch is refused, not silently ignored.
    with pytest.raises(InputError, match="drift --server toyserve compares answers that take none"):
        drift.DriftRun((), (), GpuArch.SM90, **run, explicit_arch=True).check()  # type: ignore[arg-type]


def test_roundtrip_reaches_the_servers_checks_and_launch_line_through_the_tables(toyserve: None) -> None:
    ctx = _context(roundtrip.roundtrip, ["toy-model", "--toy-window", "4"])

    def run(inject: str | None) -> RoundtripJob:
        given = dict(device="cpu", requests=8, tokens=256, seed=0, inject=inject, engine=Engine.KVDOCTOR, server=TOY)
        given.update(gpu_arch=GpuArch.SM100, emulate_d2h=False, junit_path=None, server_args=tuple(ctx.args))
        return RoundtripJob("toy-model", given)

    run(None).check()
    with pytest.raises(InputError, match="ToyServe's round trip injects no fault"):
        run("drop-kv").check()
    assert run(None).launch_line() == LaunchLine("toy-model", ("--toy-window", "4"))


def test_the_real_cli_still_offers_sglang_and_vllm_only(toyserve: None) -> None:
    assert [s.value for s in Server] == ["sglang", "vllm"]
    assert servers.servers() == ("sglang", "vllm", TOY)
    out = CliRunner().invoke(app, ["inspect", "toy-model", "--server", TOY])
    assert out.exit_code == 2 and "'toyserve' is not one of 'sglang', 'vllm'" in out.output


def test_a_server_missing_from_a_table_fails_loudly() -> None:
    with pytest.raises(KeyError, match="no drift side for server 'toyserve'"):
        servers.lookup(api_drift.SIDES, TOY, "drift side")
