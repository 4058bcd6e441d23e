"""A consistency run recorded by the run's own timing code (``Stopwatch``, ``timed_burst``, ``evaluate``),
with a scripted clock and scripted replies in place of servers: what the bench reads, without servers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.result import Burst, ConsistencyResult, Stopwatch
from kvdoctor.consistency.run import evaluate, timed_burst
from kvdoctor.consistency.workload import Workload

# Seconds each step of the scripted run takes on the scripted clock.
PREPARE_S, WARM_S, COMPARE_S, TEARDOWN_S, TRACE_S = 2.0, 3.0, 0.5, 4.0, 0.25
READY_S = {"reference": 100.0, "pressured": 120.0}  # launch to first healthy answer
BURST_S = {"reference": 60.0, "reference-repeat": 62.0, "pressured": 150.0}
GAP_S = 0.125  # bookkeeping between phases (a /metrics read), which no phase covers


class ScriptedClock:
    """A monotonic clock the test moves by hand (no sleeps): ``advance`` is what a step of the run costs."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def generations(requests: int, length: int, *, diverge: bool = False) -> list[Generation]:
    gens = [
        Generation(tuple(range(i, i + length)), tuple([-1.0] * length), tuple([0.5] * length)) for i in range(requests)
    ]
    if diverge:
        g = gens[1]
        gens[1] = Generation((*g.tokens[:3], 999, *g.tokens[4:]), g.logprobs, g.margins)
    return gens


def _reply(clock: ScriptedClock, seconds: float, gens: list[Generation]) -> Callable[[], list[Generation]]:
    """A send that takes SECONDS on CLOCK and answers GENS."""

    def send() -> list[Generation]:
        clock.advance(seconds)
        return gens

    return send


def recorded(
    *, requests: int = 8, length: int = 24, pressured: int | None = 5, diverge: bool = False, slow: float = 1.0
) -> ConsistencyResult:
    """The phases in the order ``kvdoctor.consistency.run.run`` records them; SLOW stretches every step."""
    clock = ScriptedClock()
    watch = Stopwatch(clock)
    launch_s: dict[str, float] = {}
    bursts: list[Burst] = []
    clock.advance(PREPARE_S * slow)
    watch.record("prepare", 0.0)
    startup_from = watch.now()
    launched = {role: watch.now() for role in READY_S}  # every server launched at once
    for role, ready in READY_S.items():
        clock.advance(ready * slow - (watch.now() - launched[role]))
        launch_s[role] = round(watch.server(role, launched[role]).seconds, 1)
    watch.record("start-up", startup_from)
    with watch.phase("warm-up"):
        clock.advance(WARM_S * slow)
    outputs: dict[str, list[Generation]] = {}
    for name, seconds in BURST_S.items():
        clock.advance(GAP_S)
        gens = generations(requests, length, diverge=diverge and name == "pressured")
        outputs[name], burst = timed_burst(watch, name, "http://127.0.0.1:1", _reply(clock, seconds * slow, gens))
        bursts.append(burst)
    r = ConsistencyResult(
        "llama-3.1-8b",
        "dense",
        "single",
        "cpu",
        True,
        Workload(requests, 16, length, requests).to_dict(),
        run_dir=None,
        launch_s=launch_s,
        bursts=bursts,
        retractions={"reference": 0, "pressured": pressured},
        retraction_source="metrics",
        stand_in={"used": True, "log": "x", "calls": []},
    )
    with watch.phase("compare"):
        r = evaluate(r, outputs["reference"], outputs["reference-repeat"], outputs["pressured"], stand_in_used=True)
        clock.advance(COMPARE_S * slow)
    teardown_from = watch.now()
    clock.advance(TEARDOWN_S * slow)
    watch.record("teardown", teardown_from)
    with watch.phase("trace"):
        clock.advance(TRACE_S * slow)
    return replace(r, wall_s=watch.now(), timeline=watch.timeline)
