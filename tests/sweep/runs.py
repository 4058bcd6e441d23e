"""Consistency results as the real run returns them, for the sweep's orchestration tests (no server launched here:
the real-server sweep is ``tests/sweep/test_sweep_servers.py``). A result is built from kvdoctor's own result and
gate classes, so the sweep reads exactly what a real run hands it."""

from __future__ import annotations

from collections.abc import Callable

from kvdoctor._exceptions import EXIT_DEPLOYMENT
from kvdoctor.consistency.gates import Gate
from kvdoctor.consistency.prepared import Prepared
from kvdoctor.consistency.result import Burst, ConsistencyResult, settled


def result(
    *, red: bool = False, retractions: int = 3, fired: bool | None = None, run_dir: str = "/run"
) -> ConsistencyResult:
    gates = [
        Gate(
            "tokens", not red, "diverged" if red else "passed", "2/12 requests diverged" if red else "12/12 identical"
        ),
        Gate("logprobs", True, "passed", "max |Δlogprob| 1e-06 within 0.0004"),
        Gate(
            "pressure",
            retractions > 0,
            "passed" if retractions else "no_teeth",
            f"pressured run retracted {retractions}, the reference 0 (metrics)",
        ),
    ]
    if fired is not None:
        gates.append(
            Gate(
                "fault-fired",
                fired,
                "passed" if fired else "no_teeth",
                "fault file x fired" if fired else "never fired",
            )
        )
    r = ConsistencyResult(
        model="lfm2-1.2b",
        family="lfm2",
        topology="single",
        device="cpu",
        shrunk=True,
        workload={},
        gates=gates,
        retractions={"reference": 0, "pressured": retractions},
        total=12,
        identical=10 if red else 12,
        run_dir=run_dir,
        bursts=[Burst("pressured", "http://x", 1.0, 10, 10.0, 5.0, 10.0)],
    )
    return settled(r)


def died(*, served: bool) -> ConsistencyResult:
    r = ConsistencyResult(
        model="lfm2-1.2b",
        family="lfm2",
        topology="single",
        device="cpu",
        shrunk=True,
        workload={},
        exit_code=EXIT_DEPLOYMENT,
        exit_reason="server_died",
        message="pressured: exited with 1: ValueError: nope",
        bursts=[Burst("pressured", "http://x", 1.0, 10, 10.0, 5.0, 10.0)] if served else [],
    )
    return r


Rule = Callable[[Prepared], ConsistencyResult]


def planted(*flags: str, green_in: tuple[str, ...] = ()) -> tuple[Rule, list[Prepared]]:
    """A run that is red exactly where every one of FLAGS is among the subject's flags (green on a release whose
    overlay folder name ends with one of GREEN_IN), and the list of every run it was asked for."""
    asked: list[Prepared] = []

    def run(prepared: Prepared, notify: object = None) -> ConsistencyResult:
        asked.append(prepared)
        o = prepared.options
        words = " ".join(o.subject_args)
        older = any(p.endswith(g) for p in o.server_path for g in green_in)
        return result(red=all(f in words for f in flags) and not older, run_dir=f"/run/{len(asked)}")

    return run, asked


def red_unless(flag: str) -> tuple[Rule, list[Prepared]]:
    """A run red in every configuration without FLAG among the subject's flags (the overlap finding's shape: the
    server's defaults are red, one flag set makes it green)."""
    asked: list[Prepared] = []

    def run(prepared: Prepared, notify: object = None) -> ConsistencyResult:
        asked.append(prepared)
        return result(red=flag not in prepared.options.subject_args, run_dir=f"/run/{len(asked)}")

    return run, asked
