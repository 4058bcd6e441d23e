"""A replayed bug's verdict: its control green for the right reason AND its subject red (or loud) for the right one.

The worst outcome of a replay is a confident wrong one, so each side is read from its run's own gates, never from
its exit code alone:

- the control is green only when its run passed with the scenario's proof gate present and passed (a retraction,
  a prefix hit, a transfer happened: a run that never took the path is green for the wrong reason);
- a red subject must have failed on the tokens (or logprobs) gate alone: every gate that gives the check its
  teeth (the proof gate, sensitivity, noise floor, stand-in, the fault seen firing) passed. A red from a fault that
  never fired, or from a path that never ran, is no reproduction;
- the component: where the run attributes the first divergence (the state trace's finding) it must be one the
  replay expects; where the run names none, the replay's expectation is reported as such (``component_source``:
  ``expected``), never as a finding;
- a loud subject must end as a deployment failure (exit 3) whose message holds the server's own error line;
- a case that did not run (the vLLM engine is not installed here) is ``not-run``: never counted as reproduced.

Pure: reads results, starts nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvdoctor._exceptions import EXIT_DEPLOYMENT, EXIT_GATE, EXIT_PASS
from kvdoctor.core.record import record
from kvdoctor.core.replays import Outcome, Replay
from kvdoctor.replay.plan import side

if TYPE_CHECKING:
    from kvdoctor.consistency.result import ConsistencyResult

__all__ = ["DIVERGENCE_GATES", "FIRED_GATE", "BugVerdict", "RoundtripRows", "Run", "Verdict", "judge"]

DIVERGENCE_GATES = frozenset({"tokens", "logprobs"})  # the gates a red subject may fail (and must fail one of)
FIRED_GATE = "fault-fired"

GREEN, RED, LOUD = "green", "red", "loud"
NOT_GREEN, NOT_RED, NOT_LOUD = "not-green", "not-red", "not-loud"
DEPLOYMENT_FAILED, NOT_RUN = "deployment-failed", "not-run"
REPRODUCED, NOT_REPRODUCED = "reproduced", "not-reproduced"


@record(frozen=True)
class RoundtripRows:
    """What a replay reads of an engine round trip (its rows' verdict), from the result or its ``--json``."""

    ok: bool
    failing: list[str]
    expected_red: list[str]
    inject_matched: bool | None
    components: int

    @classmethod
    def of(cls, result: Any) -> RoundtripRows:
        return cls(
            result.ok, list(result.failing), list(result.expected_red), result.inject_matched, len(result.components)
        )

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> RoundtripRows:
        return cls(doc["ok"], doc["failing"], doc["expected_red"], doc["inject_matched"], len(doc["components"]))


@record(frozen=True)
class Run:
    """What one case produced: a consistency result, a round-trip result, or why it did not run."""

    consistency: ConsistencyResult | None = None
    roundtrip: RoundtripRows | None = None
    not_run: str = ""  # why it did not run here (empty: it ran)
    wall_s: float = 0.0  # measured around the case when it ran alone; else its result's own
    error: str = ""  # an in-process round trip that died (DeploymentError, exit 3): its message

    @property
    def exit_code(self) -> int | None:
        if self.error:
            return EXIT_DEPLOYMENT
        if self.consistency is not None:
            return self.consistency.exit_code
        if self.roundtrip is not None:
            return EXIT_PASS if self.roundtrip.ok else EXIT_GATE
        return None

    @property
    def run_dir(self) -> str | None:
        return self.consistency.run_dir if self.consistency is not None else None


@record(frozen=True)
class Verdict:
    """One side of a replay. ``ok``: what the bug's row needs of this side holds."""

    role: str  # control or subject
    case: str  # the case's name in its group (the fault, or no-fault)
    verdict: str  # green, red, loud, not-green, not-red, not-loud, deployment-failed, not-run
    ok: bool
    reason: str
    exit_code: int | None
    wall_s: float
    run_dir: str | None
    summary: str  # the run's own summary line

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@record(frozen=True)
class BugVerdict:
    """A bug's row: reproduced only when the control is green and the subject red (or loud), both for the right
    reason. ``first_divergence``: the subject's first diverging request, position and component."""

    replay: Replay
    status: str  # reproduced, not-reproduced, not-run, deployment-failed
    reason: str
    control: Verdict
    subject: Verdict
    first_divergence: dict[str, Any] | None

    @property
    def reproduced(self) -> bool:
        return self.status == REPRODUCED


def _gate(result: ConsistencyResult, name: str | None) -> Any:
    return next((g for g in result.gates if g.name == name), None) if name else None


def _verdict(role: str, case: str, run: Run, verdict: str, ok: bool, reason: str) -> Verdict:
    summary = run.consistency.summary_line() if run.consistency is not None else run.error
    if run.roundtrip is not None:
        failing = ", ".join(run.roundtrip.failing) or "none"
        summary = f"round trip {'ok' if run.roundtrip.ok else 'red'}; failing rows: {failing}"
    return Verdict(role, case, verdict, ok, reason, run.exit_code, round(run.wall_s, 3), run.run_dir, summary)


def _unfinished(role: str, case: str, run: Run) -> Verdict | None:
    """The side's verdict when it did not run or its deployment failed; None when it has a verdict to read."""
    if run.error:
        return _verdict(role, case, run, DEPLOYMENT_FAILED, False, run.error)
    if run.consistency is None and run.roundtrip is None:
        return _verdict(role, case, run, NOT_RUN, False, run.not_run or "not run")
    if run.consistency is not None and run.consistency.exit_code not in (EXIT_PASS, EXIT_GATE):
        return _verdict(role, case, run, DEPLOYMENT_FAILED, False, run.consistency.summary_line())
    return None


def control_verdict(r: Replay, case: str, run: Run) -> Verdict:
    """Green only with the run passed and the scenario's proof gate present and passed."""
    done = _unfinished("control", case, run)
    if done is not None:
        return done
    if run.roundtrip is not None:
        rt = run.roundtrip
        if rt.ok:
            return _verdict("control", case, run, GREEN, True, f"every row of the round trip matches ({rt.components})")
        return _verdict("control", case, run, NOT_GREEN, False, f"the round trip is red: {', '.join(rt.failing)}")
    result = run.consistency
    assert result is not None
    proof = _gate(result, r.proof)
    if r.proof and proof is None:
        return _verdict(
            "control", case, run, NOT_GREEN, False, f"no {r.proof} gate: the path is not proven to have run"
        )
    failed = [g for g in result.gates if not g.passed]
    if failed or result.exit_code != EXIT_PASS:
        why = failed[0].message if failed else result.summary_line()
        return _verdict("control", case, run, NOT_GREEN, False, why)
    said = proof.message if proof is not None else "every gate passed"
    return _verdict("control", case, run, GREEN, True, said)


def _fired(r: Replay, result: ConsistencyResult) -> str | None:
    """Why R's fault is not proven to have fired in RESULT; None when it is (or R has no fault)."""
    if r.fault is None:
        return None
    gate = _gate(result, FIRED_GATE)
    if gate is not None:
        return None if gate.passed else gate.message
    f = result.fault
    if f is not None and f.installed and (f.backups + f.restores) > 0:
        return None
    return f"--inject {r.fault} is not proven to have fired (no {FIRED_GATE} gate, no firing counted)"


def _red(r: Replay, case: str, run: Run) -> Verdict:
    result = run.consistency
    assert result is not None
    if result.exit_code == EXIT_PASS:
        return _verdict("subject", case, run, NOT_RED, False, f"green: {result.summary_line()}")
    failed = [g for g in result.gates if not g.passed]
    wrong = [g for g in failed if g.name not in DIVERGENCE_GATES]
    if wrong:
        return _verdict("subject", case, run, NOT_RED, False, f"red for another reason: {wrong[0].message}")
    if not failed:
        return _verdict("subject", case, run, NOT_RED, False, f"exit 1 with no failed gate: {result.summary_line()}")
    if r.proof and _gate(result, r.proof) is None:
        return _verdict("subject", case, run, NOT_RED, False, f"no {r.proof} gate: the path is not proven to have run")
    unfired = _fired(r, result)
    if unfired:
        return _verdict("subject", case, run, NOT_RED, False, unfired)
    named = _component(result)
    if named and r.expect.components and named not in r.expect.components:
        why = f"red, but the first divergence is attributed to {named}, not {' or '.join(r.expect.components)}"
        return _verdict("subject", case, run, NOT_RED, False, why)
    return _verdict("subject", case, run, RED, True, failed[0].message)


def _loud_in_process(r: Replay, case: str, run: Run) -> Verdict:
    """A round trip's loud end: the engine raised (exit 3) with the expected words in its message."""
    if not run.error:
        return _verdict("subject", case, run, NOT_LOUD, False, "the round trip completed without an error")
    if r.expect.line not in run.error:
        why = f"the round trip died without {r.expect.line!r}: {run.error}"
        return _verdict("subject", case, run, NOT_LOUD, False, why)
    return _verdict("subject", case, run, LOUD, True, f"exit 3 with {r.expect.line!r}")


def _loud(r: Replay, case: str, run: Run) -> Verdict:
    result = run.consistency
    assert result is not None
    if result.exit_code != EXIT_DEPLOYMENT:
        return _verdict("subject", case, run, NOT_LOUD, False, f"the server survived: {result.summary_line()}")
    if r.expect.line not in result.message:
        why = f"the deployment failed without the server's line {r.expect.line!r}: {result.summary_line()}"
        return _verdict("subject", case, run, NOT_LOUD, False, why)
    if r.fault is not None and not (result.fault is not None and result.fault.installed):
        why = f"the server died, but --inject {r.fault} is not seen installed in it: {result.summary_line()}"
        return _verdict("subject", case, run, NOT_LOUD, False, why)
    count = result.retractions.get("pressured")
    tally = f"{count if count is not None else '?'} retraction(s) counted"
    return _verdict("subject", case, run, LOUD, True, f"exit 3 with {r.expect.line!r} ({tally})")


def subject_verdict(r: Replay, case: str, run: Run) -> Verdict:
    """Red (or loud) for the right reason, as the module docstring says."""
    if r.expect.outcome is Outcome.LOUD and run.consistency is not None:
        return _loud(r, case, run)
    if r.expect.outcome is Outcome.LOUD and (run.error or run.roundtrip is not None):
        return _loud_in_process(r, case, run)
    done = _unfinished("subject", case, run)
    if done is not None:
        return done
    if run.roundtrip is not None:
        rt = run.roundtrip
        if rt.ok:
            return _verdict("subject", case, run, NOT_RED, False, "every row of the round trip matches")
        if not rt.inject_matched:
            why = f"red on rows the fault does not own: {', '.join(rt.failing)} (expected {rt.expected_red})"
            return _verdict("subject", case, run, NOT_RED, False, why)
        return _verdict("subject", case, run, RED, True, f"the fault's rows are red: {', '.join(rt.failing)}")
    return _red(r, case, run)


def _component(result: ConsistencyResult) -> str | None:
    trace = result.state_trace
    finding = trace.finding if trace is not None else None
    return finding.get("component") if finding else None


def first_divergence(r: Replay, run: Run) -> dict[str, Any] | None:
    """The subject's first diverging request and position, and the component: the run's attribution when it made
    one (``trace``), else the round trip's failing rows (``rows``), else what the replay expects (``expected``)."""
    if run.roundtrip is not None and not run.roundtrip.ok:
        failing = ", ".join(run.roundtrip.failing)
        return {"request": None, "position": None, "by": "rows", "component": failing, "source": "rows"}
    result = run.consistency
    if result is None:
        return None
    first = result.first_divergence
    drift = result.first_drift
    if first is not None:
        request, position, how = first.index, first.position, "token"
    elif drift is not None:  # red by the logprobs alone: where they first drifted
        request, position, how = drift["request"], drift["position"], "logprobs"
    else:
        return None
    named = _component(result)
    expected = " or ".join(r.expect.components) or None
    return {
        "request": request,
        "position": position,
        "by": how,
        "component": named or expected,
        "source": "trace" if named else "expected",
    }


def judge(r: Replay, control: Run, subject: Run) -> BugVerdict:
    """R's row from its control's run and its subject's."""
    c = control_verdict(r, side(r, control=True).case.name, control)
    s = subject_verdict(r, side(r, control=False).case.name, subject)
    sides = (c, s)
    if c.ok and s.ok:
        status, reason = REPRODUCED, f"control {c.verdict}, subject {s.verdict}"
    elif any(v.verdict == NOT_RUN for v in sides):
        status, reason = NOT_RUN, next(f"{v.role}: {v.reason}" for v in sides if v.verdict == NOT_RUN)
    elif any(v.verdict == DEPLOYMENT_FAILED for v in sides):
        status, reason = (
            DEPLOYMENT_FAILED,
            next(f"{v.role}: {v.reason}" for v in sides if v.verdict == DEPLOYMENT_FAILED),
        )
    else:
        status, reason = NOT_REPRODUCED, next(f"{v.role} {v.verdict}: {v.reason}" for v in sides if not v.ok)
    return BugVerdict(r, status, reason, c, s, first_divergence(r, subject) if s.ok else None)
