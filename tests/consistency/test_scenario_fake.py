"""A fourth scenario registered through the tables alone (issue 40, "Done when"): one line of
``consistency.scenarios.SCENARIOS`` naming its behaviour object (below: ``soak``, with a result class of its own) and
one line of SGLang's room table naming its part (a subclass of ``SglangPart`` that adds a flag to the pressured server).
Nothing of kvdoctor is edited: the commands reach it, or are untouched by it, through the tables.

What it proves: ``consistency --dry-run --scenario soak`` runs the room's part (its flag is in the plan), the terminal
printer prints the scenario's own lines for its result (``scenarios.of``), a server whose room has no line for it
refuses it in the scenario's own words, and every other command (``--version``, ``inspect``, ``faults``, ``replay
--list``, ``roundtrip``) runs as it did. Taken back after each test (the caches of both tables cleared).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from kvdoctor.cli.app import app
from kvdoctor.cli.consistency import print_result
from kvdoctor.consistency import scenarios, servers
from kvdoctor.consistency.deploy import ScenarioPlan
from kvdoctor.consistency.gates import Gate
from kvdoctor.consistency.prepared import ConsistencyOptions
from kvdoctor.consistency.result import ConsistencyResult
from kvdoctor.consistency.scenarios.preempt import pressure
from kvdoctor.consistency.servers.sglang import deployment as sglang_room
from kvdoctor.consistency.servers.sglang.part import SglangPart

SOAK = "soak"
MARK = ("--schedule-policy", "lpm")  # a real SGLang flag the part adds to the pressured server


@dataclass(frozen=True)
class SoakResult(ConsistencyResult):
    soak: dict[str, Any] | None = None  # the scenario's evidence, its own JSON key


class Soak:
    name = SOAK
    proof = "every request is held for a second burst"
    result_class = SoakResult
    acted_on = "soaked request(s)"

    def judge(self, result: ConsistencyResult, evidence: Mapping[str, Any], server: str) -> tuple[Gate, ...]:
        return (pressure(result, server),)

    def head_lines(self, prepared: Any, preview: Any) -> list[str]:
        return ["soak: every prompt held for a second burst"]

    def result_lines(self, result: ConsistencyResult) -> list[str]:
        return [f"soak: {getattr(result, SOAK)}"]


class SoakPart(SglangPart):
    name = SOAK

    def plan(self, o: ConsistencyOptions) -> ScenarioPlan:
        return ScenarioPlan(role_args={"pressured": MARK})


SCENARIO = Soak()
PART = SoakPart()


def _clear() -> None:
    scenarios.get.cache_clear()
    scenarios._by_class.cache_clear()
    servers.load_part.cache_clear()


@pytest.fixture
def soak(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    _clear()
    monkeypatch.setitem(scenarios.SCENARIOS, SOAK, f"{__name__}:SCENARIO")  # the one line of the scenario table
    monkeypatch.setitem(sglang_room.SCENARIOS, SOAK, f"{__name__}:PART")  # the one line of SGLang's room
    yield SOAK
    monkeypatch.undo()
    _clear()


def _kvdoctor(*argv: str) -> Any:
    return CliRunner().invoke(app, list(argv), env={"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"})


def test_the_scenario_is_unknown_without_its_lines() -> None:
    out = _kvdoctor("consistency", "llama-3.1-8b", "--shrink", "--dry-run", "--scenario", SOAK)
    assert out.exit_code == 2 and f"--scenario must be one of {', '.join(scenarios.names())}" in out.output


def test_a_dry_run_reaches_the_rooms_part(soak: str) -> None:
    out = _kvdoctor("consistency", "llama-3.1-8b", "--shrink", "--dry-run", "--scenario", soak, "--json")
    assert out.exit_code == 0, out.output
    steps = {s["role"]: s["argv"] for s in json.loads(out.output)["deployment"]["steps"]}
    pressured = " ".join(steps["pressured"])
    assert " ".join(MARK) in pressured and " ".join(MARK) not in " ".join(steps["reference"])


def test_the_printer_prints_the_scenarios_own_lines(soak: str) -> None:
    assert scenarios.of(SoakResult("m", "", "single", "cpu", True, {})) is SCENARIO
    console = Console(record=True, width=200)
    print_result(console, SoakResult("m", "", "single", "cpu", True, {}, soak={"held": 3}))
    assert "soak: {'held': 3}" in console.export_text()


def test_a_server_without_a_line_for_it_refuses_it_in_the_scenarios_words(soak: str) -> None:
    out = _kvdoctor("consistency", "llama-3.1-8b", "--shrink", "--dry-run", "--server", "vllm", "--scenario", soak)
    assert out.exit_code == 2
    assert f"--scenario {soak} runs on --server sglang only ({SCENARIO.proof})" in out.output


@pytest.mark.parametrize(
    "argv",
    [
        ("--version",),
        ("inspect", "lfm2-1.2b"),
        ("faults",),
        ("replay", "--list"),
        ("roundtrip", "inkling-small", "--device", "cpu", "--requests", "2", "--tokens", "16", "--layers", "1"),
    ],
)
def test_the_other_commands_run_as_they_did(soak: str, argv: tuple[str, ...]) -> None:
    with_it = _kvdoctor(*argv)
    assert with_it.exit_code == 0, with_it.output


def test_drift_answers_as_it_did(monkeypatch: pytest.MonkeyPatch) -> None:
    """``drift`` reads no scenario: with the fake registered it answers exactly as without (here, where SGLang is not
    installed, the same refusal; in the SGLang environment, the same verdict)."""
    argv = ("drift", "--fixture", "lfm2-1.2b", "--case", "colocated")
    without = _kvdoctor(*argv)
    with_it = _registered(monkeypatch, lambda: _kvdoctor(*argv))
    untimed = re.compile(r"\d+(\.\d+)? s\b")  # the run's wall time differs, nothing else may
    assert (with_it.exit_code, untimed.sub("T s", with_it.output)) == (
        without.exit_code,
        untimed.sub("T s", without.output),
    )


def _registered(monkeypatch: pytest.MonkeyPatch, call: Any) -> Any:
    _clear()
    with monkeypatch.context() as m:
        m.setitem(scenarios.SCENARIOS, SOAK, f"{__name__}:SCENARIO")
        m.setitem(sglang_room.SCENARIOS, SOAK, f"{__name__}:PART")
        try:
            return call()
        finally:
            _clear()
