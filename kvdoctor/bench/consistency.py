"""``kvdoctor bench consistency``: where one real consistency run's time goes, read from the run's own clock.

The run (``kvdoctor.consistency.run``) records its :class:`~kvdoctor.consistency.result.Timeline` as it
goes: its phases back to back (prepare, start-up, warm-up, the three bursts, compare, teardown, trace),
each server's launch to first healthy answer, each burst's start, end and output tokens. This module only
reads that record (nothing is re-timed around the run) and puts the ratios of that one run side by side:
the pressured deployment's tok/s against the reference's, the reference's repeat against itself (the
timing's own run-to-run noise on this machine), start-up's share of the total, and the whole run against
issue 18's target: both deployments of one model in under 6 minutes on 2 cores.

A run that did not produce its subject gives no number: a deployment that failed is exit 3, an
interrupted run 130/143, and a pressured deployment that retracted nothing (or whose count is unknown,
or a reference that retracted: the run's own ``pressure`` gate) exit 1; "tok/s under retraction" from a
run that never retracted would be a wrong answer given confidently. A run that retracted but failed
another gate (a divergence) is measured, and exits 1 with that gate named: the bench never turns a red
run green.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kvdoctor._exceptions import EXIT_GATE, EXIT_PASS, DeploymentError, GateFailure, InternalError, Interrupted
from kvdoctor.bench import report as bench_report
from kvdoctor.consistency.result import ConsistencyResult, Span, Timeline
from kvdoctor.report.units import noun_for

TARGET_S = 360.0  # issue 18 ("Speed"): both deployments of one model in under 6 minutes ...
TARGET_CPUS = 2  # ... on 2 cores
BURSTS = ("reference", "reference-repeat", "pressured")
STARTUP = "start-up"
PRESSURE_GATE = "pressure"


@dataclass(frozen=True)
class ServerReady:
    """One server: launched at ``launched_s``, first healthy answer at ``ready_s`` (seconds into the run)."""

    role: str
    launched_s: float
    ready_s: float
    seconds: float


@dataclass(frozen=True)
class Phase:
    name: str
    start_s: float
    seconds: float
    share: float  # of the run's total wall time


@dataclass(frozen=True)
class BurstRate:
    """One send of the whole workload: its wall time, output tokens and tok/s, from the run's clock."""

    name: str
    deployment: str  # reference or pressured: whose /metrics counted ``retractions``
    wall_s: float
    output_tokens: int
    tokens_per_s: float
    retractions: int  # the deployment's count over its bursts (the reference's covers both of its own)


@dataclass(frozen=True)
class Ratios:
    """Side by side, from the same run."""

    pressured_vs_reference: float  # pressured tok/s / reference tok/s
    repeat_vs_reference: float  # the same deployment twice: the timing's own noise
    startup_share: float  # start-up seconds / total seconds
    vs_target: float  # total seconds / TARGET_S


@dataclass(frozen=True)
class ConsistencyBench:
    model: str
    topology: str
    device: str
    shrunk: bool
    workload: dict[str, int]
    cpus: int
    target_s: float
    target_cpus: int
    total_s: float
    startup_s: float
    timed_s: float  # the phases' sum (the rest, ``untimed_s``, is bookkeeping between them)
    untimed_s: float
    servers: list[ServerReady]
    phases: list[Phase]
    bursts: list[BurstRate]
    retractions: dict[str, int]
    ratios: Ratios
    consistency: dict[str, Any]  # the measured run's own outcome: exit_code, exit_reason, passed, message
    run_dir: str | None
    warnings: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 when the measured run passed; 1 when it failed a gate (never a green bench over a red run)."""
        return EXIT_PASS if self.consistency["passed"] else EXIT_GATE

    def burst(self, name: str) -> BurstRate:
        return next(b for b in self.bursts if b.name == name)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "exit_code": self.exit_code}

    def detail(self) -> str:
        """The status line: the headline ratios, and the consistency run's failed gate if any."""
        r = self.ratios
        head = (
            f"{self.total_s:.0f} s in all ({r.vs_target:.2f}x the {TARGET_S / 60:.0f}-minute target), start-up "
            f"{r.startup_share:.0%} of it; pressured {r.pressured_vs_reference:.2f}x the reference's tok/s "
            f"with {self.retractions['pressured']} {noun_for(self.retractions['pressured'], 'retraction')}"
        )
        if self.exit_code != EXIT_PASS:
            return f"{head}; the consistency run FAILED: {self.consistency['message']}"
        return head


def measure(result: ConsistencyResult) -> ConsistencyBench:
    """The bench of RESULT, read from its timeline; raises (with the documented code) when it has no subject."""
    refuse(result)
    timeline = result.timeline
    assert timeline is not None  # refuse() proved it
    total = result.wall_s
    phases = [Phase(s.name, s.start_s, s.seconds, round(s.seconds / total, 4)) for s in timeline.phases]
    timed = sum(s.seconds for s in timeline.phases)
    startup = _phase(timeline, STARTUP)
    retractions = {k: int(v) for k, v in result.retractions.items() if v is not None}
    bursts = [_burst(_phase(timeline, name), retractions) for name in BURSTS]
    ref, repeat, pressured = bursts
    bench = ConsistencyBench(
        model=result.model,
        topology=result.topology,
        device=result.device,
        shrunk=result.shrunk,
        workload=dict(result.workload),
        cpus=timeline.cpus,
        target_s=TARGET_S,
        target_cpus=TARGET_CPUS,
        total_s=round(total, 3),
        startup_s=startup.seconds,
        timed_s=round(timed, 3),
        untimed_s=round(total - timed, 3),
        servers=[ServerReady(s.name, s.start_s, s.end_s, s.seconds) for s in timeline.servers],
        phases=phases,
        bursts=bursts,
        retractions=retractions,
        ratios=Ratios(
            pressured_vs_reference=round(_rate(pressured) / _rate(ref), 4),
            repeat_vs_reference=round(_rate(repeat) / _rate(ref), 4),
            startup_share=round(startup.seconds / total, 4),
            vs_target=round(total / TARGET_S, 4),
        ),
        consistency={
            "exit_code": result.exit_code,
            "exit_reason": result.exit_reason,
            "passed": result.passed,
            "message": result.summary_line(),
        },
        run_dir=result.run_dir,
    )
    if total > TARGET_S:
        bench.warnings.append(
            f"the run took {total:.0f} s, over issue 18's {TARGET_S:.0f} s target "
            f"(set for {TARGET_CPUS} cores; this machine: {timeline.cpus})"
        )
    return bench


def refuse(result: ConsistencyResult) -> None:
    """Raise, with the code the bench documents, when RESULT is not a run to measure."""
    where = f" (its record: {result.run_dir}/result.json)" if result.run_dir else ""
    signum = Interrupted.signal_of(result.exit_code)
    if signum is not None:
        raise Interrupted(signum)
    if result.exit_code not in (EXIT_PASS, EXIT_GATE):
        raise DeploymentError(f"nothing measured: the consistency run did not happen: {result.summary_line()}{where}")
    pressure = next((g for g in result.gates if g.name == PRESSURE_GATE), None)
    if pressure is None or not pressure.passed:
        why = pressure.message if pressure is not None else "no pressure gate in the result"
        raise GateFailure(f"nothing measured: the run's subject, retraction, did not happen: {why}{where}")
    timeline = result.timeline
    missing = [] if timeline is not None else ["the timeline"]
    if timeline is not None:
        missing = [n for n in (STARTUP, *BURSTS) if timeline.phase(n) is None]
        missing += [] if timeline.servers else ["the servers' ready times"]
    if missing or not result.wall_s > 0:
        raise InternalError(f"a consistency result with a verdict but no {', '.join(missing) or 'wall time'}")
    assert timeline is not None
    idle = [n for n in BURSTS if not (_phase(timeline, n).output_tokens and _phase(timeline, n).seconds > 0)]
    if idle:
        raise GateFailure(f"nothing measured: no tokens generated in the {', '.join(idle)} burst{where}")


def _phase(timeline: Timeline, name: str) -> Span:
    span = timeline.phase(name)
    assert span is not None  # refuse() proved it
    return span


def _rate(burst: BurstRate) -> float:
    """tok/s unrounded (a ratio of two rounded rates would move in its third digit)."""
    return burst.output_tokens / burst.wall_s


def _burst(span: Span, retractions: dict[str, int]) -> BurstRate:
    tokens = span.output_tokens or 0
    deployment = "pressured" if span.name == "pressured" else "reference"
    rate = round(tokens / span.seconds, 2)
    return BurstRate(span.name, deployment, span.seconds, tokens, rate, retractions.get(deployment, 0))


@dataclass(frozen=True)
class BenchReport(bench_report.BenchReport):
    """``kvdoctor bench consistency`` as the status line reads it."""

    bench: ConsistencyBench
    command = "bench consistency"
    suite = "kvdoctor bench consistency"
    title = "kvdoctor bench consistency"
