"""Each server's side of a consistency run, behind one :class:`Deployment` protocol, one table line per server.

The run (:mod:`kvdoctor.consistency.run`) is written once, as phase calls: prepare (the shared checks, then the
server's own), plan, launch every step under one supervisor, warm up, measure the reference and the pressured
deployment (each burst between the server's probes), compare, read the in-server log. Everything that differs by
server is a method here: its option checks, its fault refusals (the faults it installs travel in its plan's
environment), its plan, its client API, its probes and evidence, and its in-server log. Each server's room
(``consistency/servers/<server>/``) is the one place that imports its engine room (``kvdoctor.engines.<server>``)
and may branch on its own name; a third server is one more room and one more line of :data:`DEPLOYMENTS`.

What differs by scenario as well sits in the server's *part* of that scenario (:class:`ServerPart`,
``consistency/servers/<server>/<scenario>.py``: plan deltas, probes, evidence, the server's words), named by one line
of the room's :attr:`Deployment.scenarios`, which is also the list of scenarios the server runs
(``kvdoctor.consistency.scenarios``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kvdoctor._exceptions import InputError
from kvdoctor.core.servers import lookup

if TYPE_CHECKING:
    from kvdoctor.consistency import deploy, runnable
    from kvdoctor.consistency.client import Api
    from kvdoctor.consistency.compare import Generation
    from kvdoctor.consistency.prepared import ConsistencyOptions, Prepared
    from kvdoctor.consistency.result import ConsistencyResult

# One line per server: the room's Deployment.
DEPLOYMENTS: dict[str, str] = {
    "sglang": "kvdoctor.consistency.servers.sglang.deployment:DEPLOYMENT",
    "vllm": "kvdoctor.consistency.servers.vllm.deployment:DEPLOYMENT",
}

Notify = Callable[[str, str], None]


class Probe(Protocol):
    """A before/after reading of one server's ``/metrics`` around a burst (its delta, or unknown)."""

    def start(self, timeout_s: float = 10.0) -> None: ...

    def finish(self, timeout_s: float = 10.0) -> Any: ...


class ServerPart(Protocol):
    """One server's part of one scenario, as the shared code asks it (the room asks its parts more: their plan
    deltas, probes and evidence): the server's own words for the scenario, and its fault refusals."""

    def head_lines(self, prepared: Prepared, preview: deploy.Deployment) -> list[str]:
        """The run header's lines for the scenario, in this server's words."""

    def result_lines(self, result: ConsistencyResult) -> list[str]:
        """The findings' lines for the scenario's evidence, in this server's words."""

    def needs(self, name: str, scenario: str) -> str | None:
        """Why the fault NAME, on this part's path, cannot run under SCENARIO (None: the other part says it)."""

    def refuses(self, name: str) -> str | None:
        """Why this part's scenario cannot run the fault NAME, on another path (None: the generic words)."""


class Deployment(Protocol):
    """One server's side of a consistency run (check, plan, probe, client API, in-server log, faults)."""

    # The scenarios this server runs, each naming the server's part of it ("module:attribute", imported on first
    # use; kvdoctor.consistency.scenarios names the scenarios)
    scenarios: Mapping[str, str]

    def check(self, o: ConsistencyOptions) -> None:
        """The topology and plan choices this server takes (exit 2 before anything is read)."""

    def check_extra_args(self, args: tuple[str, ...]) -> None:
        """The server's own flags after ``--``: its spellings, none that the plan owns."""

    def require_environment(self, o: ConsistencyOptions) -> None:
        """The server importable in this interpreter, which launches it (exit 2 naming the environment to build);
        checked before the run directory exists, after every other input check."""

    def shrink(self, config: dict[str, Any]) -> dict[str, Any]:
        """``--shrink``'s tiny config for this server."""

    def check_model(self, o: ConsistencyOptions, kind: runnable.ModelKind) -> None:
        """A model this server cannot run where it is asked to (exit 2, naming the server's file:line)."""

    def check_fault(self, o: ConsistencyOptions, kind: runnable.ModelKind) -> None:
        """``--inject``: a fault this server installs, on a model and a plan that can show it."""

    def stand_in(self, device: str) -> bool:
        """Whether kvdoctor's import-only stand-in goes on the servers' path."""

    def bound(self, prepared: Prepared) -> Prepared:
        """What the plan and this machine hold (context, pools, footprint), then the prompts (or phases)."""

    def plan(self, prepared: Prepared, model_dir: str, run_dir: Path | None) -> deploy.Deployment:
        """Both deployments on free ports (placeholders and a placeholder run directory when RUN_DIR is None)."""

    def api(self) -> Api:
        """The server's generation endpoint: its path, request body and reply parser."""

    def probes(self, prepared: Prepared, url: str, log: Path) -> dict[str, Probe]:
        """The probes around a burst on the server at URL (LOG: its process log), ``pressure`` last."""

    def mark(self, prepared: Prepared, run_dir: Path, burst: str) -> None:
        """Just before the measured burst BURST is sent (a state trace's events from here on are its; the in-server
        log's too: ``hook_log.mark``)."""

    def reset(self, prepared: Prepared, url: str, timeout_s: float) -> None:
        """Between two cases of one run: empty the caches of the server at URL (a case must not hit the previous
        case's prefixes); ``DeploymentError`` when the server refuses."""

    def record(
        self,
        result: ConsistencyResult,
        prepared: Prepared,
        evidence: Mapping[str, Mapping[str, Any]],
        got: list[Generation],
        say: Notify,
    ) -> tuple[ConsistencyResult, dict[str, Any]]:
        """RESULT with the scenario's evidence (EVIDENCE: per role, each probe's finish), and ``evaluate``'s
        keywords."""

    def read_log(
        self,
        prepared: Prepared,
        run_dir: Path,
        result: ConsistencyResult,
        say: Notify,
        *,
        bursts: tuple[str, ...] | None = None,
    ) -> ConsistencyResult:
        """RESULT with what the in-server hooks recorded (faults installed and fired, stand-in calls), after
        teardown: of the bursts BURSTS (and start-up) only, when one run measured several cases."""


def names() -> tuple[str, ...]:
    return tuple(DEPLOYMENTS)


def deployment(server: str) -> Deployment:
    """SERVER's room (``InputError`` naming the servers consistency runs)."""
    if server not in DEPLOYMENTS:
        raise InputError(f"--server must be one of {', '.join(names())}, got {server!r}")
    return lookup(DEPLOYMENTS, server, "consistency deployment")


def scenarios() -> dict[str, tuple[str, ...]]:
    """The scenarios each server runs."""
    return {name: tuple(deployment(name).scenarios) for name in names()}


@cache
def load_part(path: str) -> Any:
    """The part a room's ``scenarios`` line names (``module:attribute``), imported on first use."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def part(server: str, scenario: str) -> ServerPart:
    """SERVER's part of SCENARIO (KeyError naming what SERVER runs, for one it does not)."""
    table = deployment(server).scenarios
    where = table.get(scenario)
    if where is None:
        raise KeyError(f"--server {server} has no part of --scenario {scenario} (it runs {', '.join(table)})")
    found: ServerPart = load_part(where)
    return found
