"""``kvdoctor replay``'s run: every chosen bug's control and subject, on as few deployments as the cases allow.

Two steps, so that bad input is refused before anything starts: :func:`prepare` reads every group
(``kvdoctor.replay.plan``) as consistency's own ``prepare`` does (no run directory, no checkpoint, no launch:
``InputError``, exit 2, for a case this machine or server cannot run) and checks every in-process round trip's
launch line; :func:`run` then runs each group, one launch for its shared cases (``run_cases``: the reference and
the subject once, each case's fault armed at run time) and one for each of its own, and judges every bug
(``kvdoctor.replay.verdict``). The servers are reached through a :class:`Runner` (the real one below; the tests
pass a fake): a replay never imports a server itself. A round trip that needs vLLM where vLLM is not installed is
reported ``not run here``, never as reproduced.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from kvdoctor._exceptions import EXIT_GATE, EXIT_PASS, DeploymentError, InputError, Interrupted
from kvdoctor.consistency.prepared import ConsistencyOptions
from kvdoctor.consistency.report import Report
from kvdoctor.consistency.result import ConsistencyResult
from kvdoctor.consistency.workload import Workload
from kvdoctor.core import environments
from kvdoctor.core.faults import Target
from kvdoctor.core.replays import Replay
from kvdoctor.engines import Capability, Engine, GpuArch, require
from kvdoctor.replay.plan import NO_FAULT, Case, Group, GroupKey, groups, side
from kvdoctor.replay.verdict import BugVerdict, RoundtripRows, Run, judge
from kvdoctor.report import reportable, serialize
from kvdoctor.roundtrip.options import Reductions, RoundtripOptions

__all__ = ["NEEDS_VLLM", "Matrix", "Prepared", "RealRunner", "Runner", "Settings", "prepare", "run"]

NEEDS_VLLM = "not run here: needs the vLLM engine env (make vllm-env, or KVDOCTOR_VLLM_PYTHON)"
Notify = Callable[[str, str], None]


@dataclass(frozen=True)
class Settings:
    """What every case of one replay shares: where runs write, how long one may take."""

    output_dir: Path = Path("kvdoctor-out/replay")
    timeout_s: float = 1800.0
    device: str = "cpu"


class Runner(Protocol):
    """The doors to the servers a replay goes through (``kvdoctor.consistency.run``'s, the engine round trip)."""

    def prepare(self, options: Any) -> Any:
        """Consistency's ``prepare(options)``: every check, nothing started (``InputError`` for bad input)."""

    def run(self, prepared: Any, notify: Notify | None = None) -> Any:
        """Consistency's ``run(prepared)``: one launch, one result (NOTIFY: its progress lines)."""

    def run_cases(self, prepared: Any, cases: tuple[Case, ...], notify: Notify | None = None) -> tuple[Any, ...]:
        """One launch, CASES measured on it (each fault armed at run time), one result per case, in order."""

    def check_cases(self, prepared: Any, cases: tuple[Case, ...]) -> None:
        """``InputError`` now for CASES that could not share PREPARED's launch (before anything starts)."""

    def roundtrip(self, key: GroupKey, fault: str | None) -> Callable[[], Any] | None:
        """The engine round trip of KEY with FAULT, checked now and run by the returned call; None when the engine
        is not installed here."""

    def check_environment(self, chosen: Sequence[Replay], command: str) -> None:
        """``InputError`` (exit 2, one line naming the environment to build) when CHOSEN's cases cannot run here."""


class RealRunner:
    """The real doors: ``kvdoctor.consistency.run`` and the vLLM engine adapter, imported when first used."""

    def check_environment(self, chosen: Sequence[Replay], command: str) -> None:
        """What CHOSEN needs here, before any work: the real servers of its served cases (SGLang's: every served
        case is) run in this interpreter (the SGLang server environment), its in-process round trips (vLLM's: every
        in-process case is, :meth:`roundtrip`) in the vLLM engine environment's (this one, ``$KVDOCTOR_VLLM_PYTHON``
        or ``.venv-vllm``; none: those cases are reported not run, never reproduced)."""
        served = [r for r in chosen if r.target is Target.SERVER]
        if served:
            pd = environments.PD_MODULES if any(r.topology == "pd" for r in served) else ()
            environments.require(environments.SGLANG_SERVER, command, also=pd)
        if any(r.in_process for r in chosen) and importlib.util.find_spec("vllm") is None:
            vllm_python()  # the interpreter roundtrip() would use: a KVDOCTOR_VLLM_PYTHON naming none is bad input

    def prepare(self, options: Any) -> Any:
        return _consistency_run().prepare(options)

    def run(self, prepared: Any, notify: Notify | None = None) -> Any:
        result = _consistency_run().run(prepared, notify=notify)
        _keep(result, prepared.options.inject or NO_FAULT)
        return result

    def run_cases(self, prepared: Any, cases: tuple[Case, ...], notify: Notify | None = None) -> tuple[Any, ...]:
        results = _consistency_run().run_cases(prepared, cases, notify=notify)
        for case, result in zip(cases, results, strict=True):
            _keep(result, case.name)
        return results

    def check_cases(self, prepared: Any, cases: tuple[Case, ...]) -> None:
        _consistency_run().check_cases(prepared, cases)

    def roundtrip(self, key: GroupKey, fault: str | None) -> Callable[[], Any] | None:
        """In this interpreter when vLLM is installed here; else in the vLLM engine env's own interpreter
        (:func:`vllm_python`: ``kvdoctor roundtrip ... --json`` there, its document read back); else None."""
        if importlib.util.find_spec("vllm") is None:
            python = vllm_python()
            return None if python is None else _roundtrip_in(python, key, fault)
        adapter = require(Engine(key.server), Capability.ROUNDTRIP)
        size = dict(key.size)
        sized = {"tokens": size["tokens"]} if "tokens" in size else {}
        reductions = Reductions(layers=size.get("layers"))
        options = RoundtripOptions(device="cpu", inject=fault, reductions=reductions, **sized)
        work = adapter.roundtrip(key.model, list(key.args), options, arch=GpuArch.SM100, emulate_d2h=False)
        return lambda: RoundtripRows.of(work(None))


def _consistency_run() -> ModuleType:
    """``kvdoctor.consistency.run``, the real servers' door: imported when a served case first runs (it loads httpx
    and psutil, which the vLLM engine environment, where in-process cases run, does not install)."""
    from kvdoctor.consistency import run

    return run


def _keep(result: Any, case: str) -> None:
    """A case's consistency result beside its run's logs, as ``kvdoctor consistency`` keeps ``result.json``: one file
    per case (``result-<case>.json``), since the cases of one launch share its run directory."""
    if not result.run_dir:
        return
    serialize.write(Path(result.run_dir) / f"result-{case}.json", reportable.json_document(Report(result)))


VLLM_PYTHON_ENV = "KVDOCTOR_VLLM_PYTHON"  # the vLLM engine env's python, when kvdoctor runs from another env


def vllm_python() -> str | None:
    """The vLLM engine env's interpreter: ``$KVDOCTOR_VLLM_PYTHON``, else the checkout's ``.venv-vllm`` (``make
    vllm-env``) when it is there; None when neither is."""
    given = os.environ.get(VLLM_PYTHON_ENV)
    if given:
        found = shutil.which(given)
        if found is None:  # a path that is not there, or not executable: bad input, never a FileNotFoundError
            raise InputError(
                f"{VLLM_PYTHON_ENV}={given}: no such interpreter (name the vLLM engine env's python, e.g. "
                ".venv-vllm/bin/python after make vllm-env, or unset it)"
            )
        return found
    beside = Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python"
    return str(beside) if beside.is_file() else None


def _roundtrip_in(python: str, key: GroupKey, fault: str | None) -> Callable[[], Any]:
    """KEY's round trip with FAULT run by PYTHON (the vLLM engine env): its rows, or a DeploymentError with the last
    line it wrote when it exited 3 (a loud fault's end) or otherwise failed."""
    argv = [python, "-m", "kvdoctor", "roundtrip", key.model, "--server", key.server, "--engine", key.server]
    argv += ["--device", "cpu", "--json", *(a for k, v in key.size for a in (f"--{k}", str(v)))]
    argv += [*(("--inject", fault) if fault else ()), *key.args]

    def call() -> RoundtripRows:
        env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu"}
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if done.returncode in (EXIT_PASS, EXIT_GATE) and done.stdout.strip():
            return RoundtripRows.from_json(json.loads(done.stdout))
        said = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise DeploymentError(f"{shlex.join(argv[2:])}: {said}")

    return call


@dataclass(frozen=True)
class PreparedGroup:
    group: Group
    shared: Any = None  # consistency's Prepared for the shared launch (no fault in its options)
    own: dict[str, Any] = field(default_factory=dict)  # case name -> Prepared with its fault injected
    calls: dict[str, Callable[[], Any] | None] = field(default_factory=dict)  # in-process: case -> the round trip


@dataclass(frozen=True)
class Prepared:
    chosen: tuple[Replay, ...]
    groups: tuple[PreparedGroup, ...]
    settings: Settings
    separate: bool = False  # every case on a launch of its own (the bench's baseline)


@dataclass(frozen=True)
class GroupRun:
    """One group as it ran: its launches and wall time, each case's run."""

    key: GroupKey
    cases: tuple[str, ...]
    launches: int
    wall_s: float
    runs: dict[str, Run]


@dataclass(frozen=True)
class Matrix:
    """A whole replay: every bug's verdict, every group's run, the wall time of it all."""

    verdicts: tuple[BugVerdict, ...]
    groups: tuple[GroupRun, ...]
    wall_s: float
    separate: bool  # every case on a launch of its own (the bench's baseline)

    @property
    def launches(self) -> int:
        return sum(g.launches for g in self.groups)


def _options(key: GroupKey, settings: Settings, fault: str | None = None) -> Any:
    """KEY's consistency options; every group writes under one output directory (each run gets a fresh run
    directory there, and the seeded checkpoints are cached there once for all of them)."""
    return ConsistencyOptions(
        model=key.model,
        shrink=True,
        topology=key.topology,
        device=settings.device,
        inject=fault,
        output_dir=settings.output_dir,
        timeout_s=settings.timeout_s,
        extra_args=key.args,
        server=key.server,
        scenario=key.scenario,
        workload=Workload(**dict(key.workload)),
    )


def prepare(chosen: Sequence[Replay], settings: Settings, runner: Runner, *, separate: bool = False) -> Prepared:
    """Every group read and checked before anything starts (module docstring)."""
    out = []
    for group in groups(chosen, separate=separate):
        key = group.key
        if key.in_process:
            calls = {c.name: runner.roundtrip(key, c.fault) for c in group.cases}
            out.append(PreparedGroup(group, calls=calls))
            continue
        shared = runner.prepare(_options(key, settings)) if group.shared else None
        if shared is not None:
            runner.check_cases(shared, group.shared)  # the cases can share its launch (faults, arming)
        own = {c.name: runner.prepare(_options(key, settings, c.fault)) for c in group.own}
        out.append(PreparedGroup(group, shared, own))
    return Prepared(tuple(chosen), tuple(out), settings, separate)


def _checked(result: Any) -> Any:
    """RESULT, unless a signal stopped it: then the whole replay stops (its servers were torn down)."""
    signum = Interrupted.signal_of(getattr(result, "exit_code", 0))
    if signum is not None:
        raise Interrupted(signum)
    return result


def _run_group(p: PreparedGroup, runner: Runner, say: Notify) -> GroupRun:
    g = p.group
    began = time.monotonic()
    runs: dict[str, Run] = {}
    if g.key.in_process:
        for c in g.cases:
            call = p.calls.get(c.name)
            if call is None:
                runs[c.name] = Run(not_run=NEEDS_VLLM)
                continue
            start = time.monotonic()
            try:
                runs[c.name] = Run(roundtrip=call(), wall_s=time.monotonic() - start)
            except DeploymentError as exc:  # the engine died inside the round trip (a loud fault's end)
                runs[c.name] = Run(error=str(exc), wall_s=time.monotonic() - start)
        return GroupRun(g.key, tuple(c.name for c in g.cases), 0, time.monotonic() - began, runs)
    if g.shared:
        say("run", f"{g.key.label}: {', '.join(c.name for c in g.shared)} on one deployment")
        try:
            results = runner.run_cases(p.shared, g.shared, say)
        except DeploymentError as exc:
            results = tuple(_failed(p.shared, str(exc)) for _ in g.shared)
        if len(results) != len(g.shared):
            raise DeploymentError(f"{g.key.label}: {len(results)} results for {len(g.shared)} cases")
        for c, result in zip(g.shared, results, strict=True):
            runs[c.name] = Run(consistency=_checked(result), wall_s=result.wall_s)
    for c in g.own:
        say("run", f"{g.key.label}: {c.name} on a deployment of its own")
        start = time.monotonic()
        result = _checked(runner.run(p.own[c.name], say))
        runs[c.name] = Run(consistency=result, wall_s=time.monotonic() - start)
    return GroupRun(g.key, tuple(c.name for c in g.cases), g.launches, time.monotonic() - began, runs)


def _failed(prepared: Any, message: str) -> Any:
    """A result for a case whose deployment failed before it produced one (exit 3, the error's line)."""
    o = prepared.options
    return ConsistencyResult(
        o.model, "", o.topology, o.device, o.shrink, {}, exit_reason="deployment_failed", message=message
    )


def run(prepared: Prepared, runner: Runner, *, notify: Notify | None = None) -> Matrix:
    """Every group of PREPARED run in order, then every bug judged from its control's run and its subject's."""
    say = notify or (lambda phase, message: None)
    began = time.monotonic()
    done = tuple(_run_group(p, runner, say) for p in prepared.groups)
    by_key = {g.key: g.runs for g in done}
    verdicts = []
    for r in prepared.chosen:
        c, s = side(r, control=True), side(r, control=False)
        verdicts.append(judge(r, by_key[c.key][c.case.name], by_key[s.key][s.case.name]))
    return Matrix(tuple(verdicts), done, time.monotonic() - began, prepared.separate)
