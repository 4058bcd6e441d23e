"""Results a replay reads, made by hand (what a consistency run or an engine round trip would return), and a runner
that hands them out while recording every call, so the orchestration is tested without a server."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from kvdoctor._exceptions import EXIT_DEPLOYMENT, EXIT_GATE, EXIT_PASS
from kvdoctor.consistency.attribution import StateTrace
from kvdoctor.consistency.compare import RequestDiff
from kvdoctor.consistency.gates import Gate
from kvdoctor.consistency.result import ConsistencyResult, FaultReport
from kvdoctor.replay.plan import Case, GroupKey
from kvdoctor.replay.verdict import RoundtripRows

TEETH = ("sensitivity", "noise-floor", "stand-in-unused")


def gates(proof: str | None, *, tokens: bool = True, fired: bool | None = None, failing: str = "") -> list[Gate]:
    """A run's gates: the proof gate, the guards, the tokens gate (TOKENS: passed), a fault-fired gate (FIRED None:
    none); FAILING: one more gate that fails (a red for the wrong reason)."""
    out = [Gate(n, True, "passed", f"{n} ok") for n in (*TEETH, *([proof] if proof else []))]
    out.append(
        Gate("tokens", True, "passed", "8/8 identical")
        if tokens
        else Gate("tokens", False, "diverged", "3/8 requests diverge; first: request 2 at token 5")
    )
    if fired is not None:
        out.append(Gate("fault-fired", fired, "passed" if fired else "no_teeth", "fired 3 times" if fired else "never"))
    if failing:
        out = [
            g if g.name != failing else Gate(g.name, False, "no_teeth", f"guard has no teeth: {failing}") for g in out
        ]
    return out


def result(
    gate_list: list[Gate], *, component: str | None = None, exit_code: int | None = None, message: str = ""
) -> ConsistencyResult:
    failed = any(not g.passed for g in gate_list)
    code = exit_code if exit_code is not None else (EXIT_GATE if failed else EXIT_PASS)
    diverged = not next(g for g in gate_list if g.name == "tokens").passed if gate_list else False
    requests = [RequestDiff(i, 8, 8, 8, False) for i in range(2)]
    if diverged:
        requests.append(RequestDiff(2, 8, 8, 5, True, position=5, ref_token=1, got_token=2))
    trace = StateTrace("digests.jsonl", recorded=True, finding={"component": component}) if component else None
    return ConsistencyResult(
        "lfm2-1.2b",
        "lfm2",
        "pd",
        "cpu",
        True,
        {},
        gates=gate_list,
        requests=requests,
        exit_code=code,
        passed=not failed,
        message=message,
        state_trace=trace,
        wall_s=10.0,
        retractions={"pressured": 4, "reference": 0},
    )


def green(proof: str | None = "pressure") -> ConsistencyResult:
    return result(gates(proof))


def red(proof: str | None = "pressure", *, component: str | None = "conv_state", fired: bool | None = True) -> Any:
    return result(gates(proof, tokens=False, fired=fired), component=component)


def dead(message: str = "decode server exited (code 1): NotImplementedError") -> ConsistencyResult:
    return replace(result([]), exit_code=EXIT_DEPLOYMENT, message=message, exit_reason="deployment_failed")


def fired_report(r: ConsistencyResult) -> ConsistencyResult:
    return replace(r, fault=FaultReport("x", "decode", installed=True, backups=2, restores=2))


@dataclass
class Prepared:
    """What a fake prepare returns: the options it was given."""

    options: Any


@dataclass
class FakeRunner:
    """Hands out ANSWER(options-or-key, case) for every case and records every call in order."""

    answer: Callable[[Any, Case], Any]
    calls: list[tuple[str, Any]] = field(default_factory=list)
    vllm: bool = False
    refuse: Callable[[Any], None] | None = None  # raises for options it refuses (bad input)

    def prepare(self, options: Any) -> Prepared:
        self.calls.append(("prepare", (options.model, options.scenario, options.extra_args, options.inject)))
        if self.refuse is not None:
            self.refuse(options)
        return Prepared(options)

    def run(self, prepared: Prepared, notify: Any = None) -> Any:
        o = prepared.options
        self.calls.append(("run", (o.model, o.scenario, o.extra_args, o.inject)))
        return self.answer(o, Case(o.inject or "no-fault", o.inject))

    def run_cases(self, prepared: Prepared, cases: tuple[Case, ...], notify: Any = None) -> tuple[Any, ...]:
        o = prepared.options
        self.calls.append(("run_cases", (o.model, o.scenario, o.extra_args, tuple(c.name for c in cases))))
        return tuple(self.answer(o, c) for c in cases)

    def check_cases(self, prepared: Prepared, cases: tuple[Case, ...]) -> None:
        self.calls.append(("check_cases", tuple(c.name for c in cases)))
        if self.refuse is not None:
            self.refuse(cases)

    def check_environment(self, chosen: Any, command: str) -> None:
        """The servers are this fake: nothing to install."""

    def roundtrip(self, key: GroupKey, fault: str | None) -> Callable[[], Any] | None:
        self.calls.append(("roundtrip", (key.model, fault)))
        if not self.vllm:
            return None

        def call() -> Any:
            answer = self.answer(key, Case(fault or "no-fault", fault))
            if isinstance(answer, BaseException):  # the engine died inside the round trip
                raise answer
            return answer

        return call

    def launches(self) -> list[tuple[str, Any]]:
        return [c for c in self.calls if c[0] in ("run", "run_cases")]


def Roundtrip(
    ok: bool,
    failing: list[str] | None = None,
    inject_matched: bool | None = None,
    expected_red: list[str] | None = None,
) -> RoundtripRows:
    """An engine round trip's rows as a replay reads them (three rows)."""
    return RoundtripRows(ok, failing or [], expected_red or [], inject_matched, 3)
