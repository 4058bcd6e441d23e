"""What one consistency run produced, fed unchanged to every serializer (JSON, JUnit, step summary, terminal)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kvdoctor._exceptions import EXIT_DEPLOYMENT, EXIT_GATE, EXIT_PASS
from kvdoctor.consistency.compare import RequestDiff
from kvdoctor.consistency.gates import Gate
from kvdoctor.report.units import noun_for


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


@dataclass
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
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0
        self.timeline = Timeline(cpus=cpus)

    def now(self) -> float:
        """Seconds since the run began."""
        return self._clock() - self._began

    def span(self, name: str, start_s: float, end_s: float, output_tokens: int | None = None) -> Span:
        return Span(name, round(start_s, 3), round(end_s, 3), round(end_s - start_s, 3), output_tokens)

    def record(self, name: str, start_s: float, end_s: float | None = None, output_tokens: int | None = None) -> Span:
        """The phase NAME, from START_S until END_S (default: now), appended to the timeline."""
        done = self.span(name, start_s, self.now() if end_s is None else end_s, output_tokens)
        self.timeline.phases.append(done)
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
        self.timeline.servers.append(ready)
        return ready


@dataclass
class FaultReport:
    name: str
    role: str
    installed: bool = False
    backups: int = 0  # retraction backups that ran through the fault
    restores: int = 0
    refused: str | None = None


@dataclass
class ConsistencyResult:
    model: str
    family: str
    topology: str
    device: str
    shrunk: bool
    workload: dict[str, int]
    model_dir: str | None = None
    checkpoint: dict[str, Any] | None = None
    weights_digest: str | None = None
    cpu_enablers: list[dict[str, str]] = field(default_factory=list)
    stand_in: dict[str, Any] = field(default_factory=dict)
    fault: FaultReport | None = None
    deployment: dict[str, Any] = field(default_factory=dict)
    launch_s: dict[str, float] = field(default_factory=dict)
    bursts: list[Burst] = field(default_factory=list)
    retractions: dict[str, int | None] = field(default_factory=dict)
    retraction_source: str = "none"
    noise_floor: dict[str, Any] | None = None
    logprob_drift: dict[str, Any] | None = None
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
    state_trace: dict[str, Any] | None = None
    timeline: Timeline | None = None  # the run's own timings (kvdoctor bench consistency reads them)
    server: str = "sglang"  # whose servers ran (sglang, vllm); retractions are vLLM's preemptions under vllm

    @property
    def first_divergence(self) -> RequestDiff | None:
        red = [d for d in self.requests if d.diverged and not d.within_noise]
        return min(red, key=lambda d: (d.position or 0, d.index)) if red else None

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
        noun = noun_for(press, "preemption" if self.server == "vllm" else "retraction")
        return f"{press if press is not None else '?'} {noun}"


@dataclass
class PrefixCacheResult(ConsistencyResult):
    """``--scenario prefix-cache``: the same result plus the scenario and its prefix-cache evidence (a separate
    class, so a preempt run's JSON, and pd-eval's that embeds one, keep exactly their keys)."""

    scenario: str = "prefix-cache"
    # workload (groups, prefix, phases), hits/queries per role from /metrics, mamba cache mode per role, the
    # subject's cached tokens per compared request (usage.prompt_tokens_details) and per phase
    prefix_cache: dict[str, Any] = field(default_factory=dict)

    def evidence(self) -> str:
        """The subject's prefix-cache hit tokens (this scenario's evidence in the preemptions' place)."""
        hits = (self.prefix_cache.get("hits") or {}).get("pressured")
        return f"{hits if hits is not None else '?'} prefix-cache hit tokens"


@dataclass
class OffloadResult(ConsistencyResult):
    """``--scenario offload``: preempt's result plus the scenario and the OffloadingConnector's evidence (a separate
    class, so a preempt run's JSON keeps exactly its keys)."""

    scenario: str = "offload"
    # the pressured server's --kv-offloading-size, and per role the bytes loaded from / stored to the CPU tier and
    # the external prefix-cache hits/queries during its bursts (deltas from /metrics; None when unknown)
    offload: dict[str, Any] = field(default_factory=dict)

    def evidence(self) -> str:
        """The preemptions and the bytes the pressured server loaded back from its CPU tier."""
        loaded = ((self.offload.get("load_bytes") or {}).get("pressured")) if self.offload else None
        return f"{super().evidence()}, {f'{loaded:,}' if loaded is not None else '?'} bytes loaded from the CPU tier"
