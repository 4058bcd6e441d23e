"""What a consistency run puts under test, one behaviour object per scenario behind one table.

A scenario says what the pressured ("subject") server must do that the reference does not, and how the run proves
it did: ``preempt`` (forced retraction/preemption, proven by the server's pressure counter), ``prefix-cache`` (the
same prefixes hit in the subject's prefix cache, proven by its hit counter in the pressure gate's place),
``offload`` (preempt's run with a CPU tier the resumed requests load from, proven beside the pressure gate) and
``transfer`` (every request crosses SGLang's PD transfer with nothing retracted, proven by kvdoctor's observer inside
the servers in the pressure gate's place).

Each scenario is one module here (its result class with the JSON keys it adds, the gates proving its path ran, its
terminal lines) and one line of :data:`SCENARIOS`, imported on first use as ``consistency.servers.DEPLOYMENTS`` is.
Each server's part of a scenario (plan deltas, probes, evidence, the server's own words) lives in its room,
``consistency/servers/<server>/<scenario>.py``, named by one line of the room's ``Deployment.scenarios``: which
scenarios a server runs is that table. The shared run (``consistency.run``), the gates and the terminal printer ask
this table and never name a scenario; ``tests/consistency/test_scenario_seam.py`` holds them to it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

from kvdoctor._exceptions import InputError
from kvdoctor.consistency.gates import Gate
from kvdoctor.consistency.result import ConsistencyResult
from kvdoctor.core.paths import DEFAULT_SCENARIO, StatePath
from kvdoctor.core.paths import get as path_record

if TYPE_CHECKING:
    from kvdoctor.consistency.deploy import Deployment
    from kvdoctor.consistency.prepared import Prepared

__all__ = ["DEFAULT", "SCENARIOS", "FaultWords", "Scenario", "check", "check_fault", "get", "names", "of"]

# One line per scenario: its module's SCENARIO. The names are --scenario's choices, in this order.
SCENARIOS: dict[str, str] = {
    "preempt": "kvdoctor.consistency.scenarios.preempt:SCENARIO",
    "prefix-cache": "kvdoctor.consistency.scenarios.prefix_cache:SCENARIO",
    "offload": "kvdoctor.consistency.scenarios.offload:SCENARIO",
    "transfer": "kvdoctor.consistency.scenarios.transfer:SCENARIO",
}
DEFAULT = DEFAULT_SCENARIO  # what a run takes unless told (kvdoctor.core.paths)


class Scenario(Protocol):
    """One scenario's behaviour: what the shared run, the gates and the terminal printer ask of it."""

    name: str
    proof: str  # what proves it, said when a server that cannot show it is asked to (the refusal's parenthesis)
    result_class: type[ConsistencyResult]  # the result a run of it fills (its own JSON keys beside preempt's)
    acted_on: str  # what an injected fault acted on, as a fault's tally names it ({on}: "resumed request(s)")

    def judge(self, result: ConsistencyResult, evidence: Mapping[str, Any], server: str) -> tuple[Gate, ...]:
        """The gates proving the scenario's path ran (between the logprob gate and the sensitivity gate), from
        RESULT and EVIDENCE (the server's ``record``'s findings, the scenario's evidence keys)."""
        ...

    def head_lines(self, prepared: Prepared, preview: Deployment) -> list[str]:
        """The run header's lines for the scenario (after the CPU enablers)."""
        ...

    def result_lines(self, result: ConsistencyResult) -> list[str]:
        """The findings' lines for the scenario's evidence (after the pressure counts)."""
        ...


class FaultWords(Protocol):
    """What a server's part of a scenario says when an ``--inject`` fault and the run's scenario do not meet."""

    def needs(self, name: str, scenario: str) -> str | None:
        """Why the fault NAME, on this part's path, cannot run under SCENARIO (None: the other part says it)."""
        ...

    def refuses(self, name: str) -> str | None:
        """Why this part's scenario cannot run the fault NAME, on another path (None: the generic words)."""
        ...


def names() -> tuple[str, ...]:
    return tuple(SCENARIOS)


def _load(path: str) -> Any:
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


@cache
def get(name: str) -> Scenario:
    """The scenario NAME (its module imported on first use); ``InputError`` (exit 2) naming the known ones."""
    if name not in SCENARIOS:
        raise InputError(f"--scenario must be one of {', '.join(names())}, got {name!r}")
    scenario: Scenario = _load(SCENARIOS[name])
    return scenario


@cache
def _by_class() -> dict[type[ConsistencyResult], Scenario]:
    return {get(name).result_class: get(name) for name in names()}


def of(result: ConsistencyResult) -> Scenario:
    """The scenario whose run RESULT is (by its result class; KeyError for a class no scenario fills)."""
    found = _by_class().get(type(result))
    if found is None:
        raise KeyError(f"no scenario fills a {type(result).__name__} (known: {', '.join(names())})")
    return found


def check(name: str, server: str, runs: Mapping[str, Mapping[str, str] | tuple[str, ...]]) -> Scenario:
    """NAME on SERVER, where RUNS says which scenarios each server runs; refused (exit 2) where SERVER cannot."""
    scenario = get(name)
    if name not in runs.get(server, ()):
        where = ", ".join(s for s, known in runs.items() if name in known)
        raise InputError(f"--scenario {name} runs on --server {where} only ({scenario.proof})")
    return scenario


def check_fault(
    scenario: str, name: str, path: StatePath, parts: Mapping[str, str], part: Callable[[str], FaultWords]
) -> None:
    """An ``--inject`` fault runs in the scenario its state path names (``kvdoctor.core.paths``), nowhere else (a
    run elsewhere would never fire it, or be confounded): refused (exit 2) under SCENARIO otherwise, in the words of
    the fault's own scenario's part (PART, of the server's table PARTS) when it has them, else of SCENARIO's."""
    wanted = path_record(path).scenario
    if wanted == scenario:
        return
    why = part(wanted).needs(name, scenario) if wanted in parts else None
    why = why or (part(scenario).refuses(name) if scenario in parts else None)
    raise InputError(
        why
        or f"--inject {name} acts on the {path.value} path: it needs --scenario {wanted} (this run is --scenario "
        f"{scenario})"
    )
