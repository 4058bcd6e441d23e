"""What one consistency run produced, fed unchanged to every serializer (JSON, JUnit, step summary, terminal).

Frozen, like every other result: the run collects into its own draft (``kvdoctor.consistency.run``) and each
step that changes the outcome (``evaluate``, a server's in-server log, :func:`settled`) returns a new result
(``dataclasses.replace``). The JSON objects the result carries are typed by their keys (``TypedDict``: plain
dicts at run time, so ``kvdoctor.report.serialize`` writes exactly the keys it always wrote, the optional
ones only when present). A scenario's own result, the keys it adds beside these, is its module's
(``kvdoctor.consistency.scenarios``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, TypeVar

from kvdoctor._exceptions import EXIT_DEPLOYMENT, EXIT_GATE, EXIT_PASS
from kvdoctor.consistency.compare import RequestDiff
from kvdoctor.consistency.gates import Gate
from kvdoctor.core.servers import facts
from kvdoctor.report.units import noun_for

if TYPE_CHECKING:
    from kvdoctor.consistency.attribution import StateTrace


@dataclass(frozen=True)
class Burst:
    """One send of the whole workload to one deployment."""

    name: str  # reference, reference-repeat, pressured
    url: str
    wall_s: float
    output_tokens: int
    tokens_per_s: float
    median_distinct_tokens: float
    median_length: float
    start_s: float | None = None  # seconds since the run began (the run's Timeline clock), when measured
    end_s: float | None = None


@dataclass(frozen=True)
class Span:
    """One stretch of a consistency run as the run itself timed it: seconds since the run began."""

    name: str  # a phase (start-up, reference, ...) or a server's role
    start_s: float
    end_s: float
    seconds: float
    output_tokens: int | None = None  # a burst's generated tokens; None for a phase that generates none


@dataclass(frozen=True)
class Timeline:
    """When each phase of the run happened and when each server became ready, on one monotonic clock.

    ``phases`` follow each other (prepare, start-up, warm-up, reference, reference-repeat, pressured,
    compare, teardown, trace); ``servers`` overlap (every process starts at once): start is the launch,
    end the first healthy answer seen (they are waited for in plan order, so one already up when its turn
    comes reads as ready then). ``cpus``: the cores this process may run on (the run's machine).
    """

    cpus: int
    phases: list[Span] = field(default_factory=list)
    servers: list[Span] = field(default_factory=list)

    def phase(self, name: str) -> Span | None:
        return next((s for s in self.phases if s.name == name), None)


class Stopwatch:
    """The run's one clock: records its :class:`Timeline` (every span measured from the same start)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._began = clock()
        self._cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0
        self._phases: list[Span] = []
        self._servers: list[Span] = []

    @property
    def timeline(self) -> Timeline:
        """What the clock recorded so far (a frozen copy: the result keeps the one it was given)."""
        return Timeline(self._cpus, list(self._phases), list(self._servers))

    def now(self) -> float:
        """Seconds since the run began."""
        return self._clock() - self._began

    def span(self, name: str, start_s: float, end_s: float, output_tokens: int | None = None) -> Span:
        return Span(name, round(start_s, 3), round(end_s, 3), round(end_s - start_s, 3), output_tokens)

    def record(self, name: str, start_s: float, end_s: float | None = None, output_tokens: int | None = None) -> Span:
        """The phase NAME, from START_S until END_S (default: now), appended to the timeline."""
        done = self.span(name, start_s, self.now() if end_s is None else end_s, output_tokens)
        self._phases.append(done)
        return done

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as the phase NAME (recorded only when the block finishes: a phase that raised did
        not happen as a measurement)."""
        start = self.now()
        yield
        self.record(name, start)

    def server(self, role: str, started_s: float) -> Span:
        """ROLE, launched at STARTED_S, answered healthy now."""
        ready = self.span(role, started_s, self.now())
        self._servers.append(ready)
        return ready


@dataclass(frozen=True)
class FaultReport:
    name: str
    role: str
    installed: bool = False
    backups: int = 0  # retraction backups that ran through the fault
    restores: int = 0
    refused: str | None = None


class FaultFileWrapDoc(TypedDict):
    """One wrap of a ``--fault-file``, as the servers' hook log saw it."""

    target: str  # module:Attr.path
    role: str  # prefill, decode, single, any
    installed: bool  # a server process of that role wrapped it
    fired: int  # armed calls that changed something (fault-fired lines)
    unchanged: int  # armed calls that said they changed nothing (fault-unchanged lines)


class FaultFileDoc(TypedDict):
    """``--fault-file``: the user's own fault, recorded as ``fault`` records ``--inject``'s
    (``kvdoctor.consistency.fault_file.record``)."""

    name: str  # what the run armed and the servers logged: the file the path resolves to, without .py
    path: str  # the resolved path the servers ran
    given: str  # the path as given (a symlink's own)
    sha256: str | None  # of the bytes kvdoctor read (the version judged)
    loaded: int  # server processes that loaded the file (fault-file-loaded lines)
    refused: str | None  # the first refusal (the file, or a target, could not be used in a server), else None
    wraps: list[FaultFileWrapDoc]


class CheckpointDoc(TypedDict):
    """The seeded checkpoint the servers loaded (``kvdoctor.consistency.checkpoint.Checkpoint.to_dict``)."""

    path: str
    config_digest: str
    seed: int
    weights_digest: str
    cached: bool
    build_s: float
    init: str


class VllmPluginDoc(TypedDict):
    log: str
    loaded: int  # how many vLLM processes loaded kvdoctor's plugin


class StandInDoc(TypedDict, total=False):
    """Whether kvdoctor's CPU stand-in was on the servers' path, and what the servers' hooks said they did."""

    used: bool
    log: str
    calls: list[str]  # stand-in functions that ran (any turns the run red)
    site_hook_patches: list[str]  # SGLang only
    vllm_plugin: VllmPluginDoc  # vLLM only


class DeploymentDoc(TypedDict):
    """Both deployments as planned (``kvdoctor.consistency.deploy.Deployment.to_dict``)."""

    topology: str
    reference_pool_tokens: int
    pressured_pool_tokens: int
    reference_url: str
    pressured_url: str
    injected_role: str | None
    steps: list[dict[str, Any]]  # each ``kvdoctor.deploy.plan.Step.to_dict`` (role, argv, env, url, health_path)


class NoiseFloorDoc(TypedDict):
    """``NoiseFloor.to_dict`` and its sentence (``kvdoctor.consistency.compare``)."""

    requests: int
    diverged_requests: int
    diverged_at: dict[str, int]
    max_abs_dlogprob: float
    non_finite_logprobs: NotRequired[int]  # only when a logprob was no finite number
    sentence: str


class LogprobDriftDoc(TypedDict):
    """``kvdoctor.consistency.compare.drift``: the requests whose logprobs moved beyond the threshold."""

    threshold: float
    requests: list[int]
    max: float
    non_finite: NotRequired[dict[str, Any]]  # count and the first few, only when a logprob was no finite number
    first: NotRequired[dict[str, Any]]  # the earliest drifting token (request, position, dlogprob), when one drifts


@dataclass(frozen=True)
class ConsistencyResult:
    model: str
    family: str
    topology: str
    device: str
    shrunk: bool
    workload: dict[str, int]
    model_dir: str | None = None
    checkpoint: CheckpointDoc | None = None
    weights_digest: str | None = None
    cpu_enablers: list[dict[str, str]] = field(default_factory=list)
    stand_in: StandInDoc = field(default_factory=StandInDoc)
    fault: FaultReport | None = None
    fault_file: FaultFileDoc | None = None  # --fault-file's record (kvdoctor.consistency.fault_file.record)
    deployment: DeploymentDoc | dict[str, Any] = field(default_factory=dict)  # {} until planned
    launch_s: dict[str, float] = field(default_factory=dict)
    bursts: list[Burst] = field(default_factory=list)
    retractions: dict[str, int | None] = field(default_factory=dict)
    retraction_source: str = "none"
    noise_floor: NoiseFloorDoc | None = None
    logprob_drift: LogprobDriftDoc | None = None
    warnings: list[str] = field(default_factory=list)  # reported, not gated (the header's warnings)
    requests: list[RequestDiff] = field(default_factory=list)
    identical: int = 0
    total: int = 0
    gates: list[Gate] = field(default_factory=list)
    passed: bool = False
    exit_code: int = EXIT_DEPLOYMENT
    exit_reason: str = "not_run"
    message: str = ""
    logs: dict[str, str] = field(default_factory=dict)
    run_dir: str | None = None
    wall_s: float = 0.0
    survivors: list[str] = field(default_factory=list)
    # PD only: the pressured decode's state trace joined with the comparison (kvdoctor.consistency.attribution)
    state_trace: StateTrace | None = None
    timeline: Timeline | None = None  # the run's own timings (kvdoctor bench consistency reads them)
    server: str = "sglang"  # whose servers ran (sglang, vllm); retractions are vLLM's preemptions under vllm
    bundle: str | None = None  # a red run's reproduction bundle (kvdoctor.consistency.bundle), when one was written

    @property
    def first_divergence(self) -> RequestDiff | None:
        red = [d for d in self.requests if d.diverged and not d.within_noise]
        return min(red, key=lambda d: (d.position or 0, d.index)) if red else None

    @property
    def first_drift(self) -> dict[str, Any] | None:
        """Where the logprobs first drift beyond the threshold (request, position, |Δlogprob|), when they do."""
        first = (self.logprob_drift or {}).get("first")
        return first if isinstance(first, dict) else None

    def summary_line(self) -> str:
        if self.exit_code not in (EXIT_PASS, EXIT_GATE):
            return self.message.splitlines()[0] if self.message else self.exit_reason
        head = f"{self.identical}/{self.total} requests identical, {self.evidence()}"
        failed = [g for g in self.gates if not g.passed]
        return f"{head}; {failed[0].message}" if failed else f"{head} ({self.wall_s:.0f} s)"

    def evidence(self) -> str:
        """What the verdict line counts beside the identical requests: the pressured server's preemptions
        (retractions under SGLang), '?' when unknown."""
        press = self.retractions.get("pressured")
        noun = noun_for(press, facts(self.server).noun)
        return f"{press if press is not None else '?'} {noun}"


Result = TypeVar("Result", bound=ConsistencyResult)


def settled(result: Result) -> Result:
    """RESULT's outcome from its gates: passed when none failed, else the first failure's reason (exit 1)."""
    failed = [g for g in result.gates if not g.passed]
    return replace(
        result,
        passed=not failed,
        exit_code=EXIT_GATE if failed else EXIT_PASS,
        exit_reason=failed[0].reason if failed else "passed",
        message="; ".join(g.message for g in result.gates),
    )
