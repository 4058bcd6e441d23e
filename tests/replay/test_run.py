"""The replay's orchestration with a fake runner: cases sharing a deployment run on one launch (its control
first), a fault that cannot be switched at run time or that kills its server gets a launch of its own, bad input
is refused before anything starts, a round trip without vLLM is not run, a signal stops the whole replay."""

from __future__ import annotations

import pytest

from kvdoctor._exceptions import EXIT_SIGTERM, DeploymentError, InputError, Interrupted
from kvdoctor.core import faults, replays
from kvdoctor.core.faults import Fault, Needs, Role, StatePath, Target
from kvdoctor.replay import plan
from kvdoctor.replay.run import NEEDS_VLLM, Settings, prepare, run
from tests.replay import fakes


def _answer(options: object, case: plan.Case) -> object:
    """A world where every fault reproduces its bug: controls green (with their scenario's proof), subjects red
    (retract-raise: its server dies with the line), the overlap finding red without --disable-overlap-schedule,
    sglang#31486's all-SWA radix cache dead of its leak check with no fault."""
    if hasattr(options, "in_process"):  # a round trip's key
        if case.fault == "swa-short-store":
            return DeploymentError("vLLM's CPU offloading manager cannot serve the sliding-window hit of group g0")
        return fakes.Roundtrip(True) if case.fault is None else fakes.Roundtrip(False, ["g1.c"], True, ["g1.c"])
    proof = {"transfer": "transfer", "prefix-cache": "prefix-cache"}.get(options.scenario, "pressure")
    if case.fault == "retract-raise":
        return fakes.fired_report(fakes.dead("decode scheduler died: NotImplementedError"))
    if case.fault is None and options.model == "laguna-all-swa" and not options.extra_args:  # sglang#31486, live
        return fakes.dead("server died: ValueError: pool memory leak detected!")
    if case.fault is None:
        overlap = options.scenario == "preempt" and options.model == "lfm2-1.2b" and not options.extra_args
        return fakes.red(proof, fired=None) if overlap else fakes.green(proof)
    if options.model == "laguna-all-swa":  # one server: no state trace names a component
        return fakes.red(proof, component=None)
    return fakes.red(proof)


def _replay(chosen: tuple, runner: fakes.FakeRunner, **kw: object):
    return run(prepare(chosen, Settings(), runner, **kw), runner)


def test_every_case_reproduces_on_two_launches_per_deployment_not_two_per_fault() -> None:
    runner = fakes.FakeRunner(_answer, vllm=True)
    m = _replay(replays.replays(), runner)
    assert [v.status for v in m.verdicts] == ["reproduced"] * len(replays.replays())
    shared = [c for c in runner.calls if c[0] == "run_cases"]
    transfer = next(c for c in shared if c[1][1] == "transfer")
    assert transfer[1][3] == ("no-fault", "drop-pd-state", "clear-pd-state")  # one launch, the control first
    assert not [c for c in runner.calls if c[0] == "run"]  # every fault here can be armed at run time
    no_overlap = next(c for c in shared if c[1][2] == ("--disable-overlap-schedule",))
    assert no_overlap[1][3] == ("no-fault", "retract-raise")  # loud: last, nothing runs on its subject after it
    faulted = {r.fault for r in replays.replays() if r.fault and not r.in_process}
    assert m.launches == len(runner.launches()) < 2 * len(faulted)


def test_a_fault_that_cannot_be_switched_at_run_time_gets_its_own_launch() -> None:
    fixed = Fault("fixed-fault", "sglang", Target.SERVER, StatePath.TRANSFER, Role.DECODE, (), "x", Needs.ANY)
    original = tuple(f for f in faults.faults() if f.server == "sglang")
    faults.register("sglang", (*original, fixed))
    try:
        case = replays.get("sglang#23773")
        alone = type(case)(**{**case.__dict__, "bug": "sglang#32995", "fault": "fixed-fault"})
        groups = plan.groups((case, alone))
        assert [c.name for c in groups[0].shared] == ["no-fault", "drop-pd-state"]
        assert [c.name for c in groups[0].own] == ["fixed-fault"] and groups[0].launches == 2
    finally:
        faults.register("sglang", original)
        faults._REGISTERED.clear()
        faults.faults.cache_clear()


def test_row_0_s_subject_and_control_are_two_deployments() -> None:
    groups = plan.groups((replays.get("kvdoctor#overlap"),))
    assert [(g.key.args, [c.name for c in g.cases]) for g in groups] == [
        (("--disable-overlap-schedule",), ["no-fault"]),
        ((), ["no-fault"]),
    ]


def test_bad_input_in_any_group_is_refused_before_anything_starts() -> None:
    def refuse(options: object) -> None:
        if getattr(options, "scenario", None) == "prefix-cache":
            raise InputError("--scenario prefix-cache runs on --server vllm only")

    runner = fakes.FakeRunner(_answer, refuse=refuse)
    with pytest.raises(InputError):
        prepare(replays.replays(), Settings(), runner)
    assert runner.launches() == []


def test_cases_that_cannot_share_a_launch_are_refused_before_anything_starts() -> None:
    def refuse(what: object) -> None:
        if isinstance(what, tuple) and "clear-pd-state" in [c.name for c in what]:
            raise InputError("fault clear-pd-state cannot be switched at run time")

    runner = fakes.FakeRunner(_answer, refuse=refuse)
    with pytest.raises(InputError):
        prepare(replays.replays(), Settings(), runner)
    assert runner.launches() == []


def test_a_round_trip_without_vllm_is_not_run_and_not_reproduced() -> None:
    chosen = tuple(r for r in replays.replays() if r.in_process)
    m = _replay(chosen, fakes.FakeRunner(_answer, vllm=False))
    assert chosen and all(v.status == "not-run" and v.subject.reason == NEEDS_VLLM for v in m.verdicts)


def test_a_signal_during_a_case_stops_the_replay() -> None:
    def stopped(options: object, case: plan.Case) -> object:
        return fakes.result(fakes.gates("transfer"), exit_code=EXIT_SIGTERM)

    runner = fakes.FakeRunner(stopped)
    with pytest.raises(Interrupted):
        _replay((replays.get("sglang#23773"), replays.get("sglang#29368")), runner)
    assert len(runner.launches()) == 1  # the second deployment never started


def test_the_bench_s_baseline_runs_every_case_alone() -> None:
    runner = fakes.FakeRunner(_answer)
    chosen = (replays.get("sglang#23773"), replays.get("sglang#32995"))
    m = _replay(chosen, runner, separate=True)
    assert m.separate and m.launches == 3 == len([c for c in runner.calls if c[0] == "run"])
    assert all(v.reproduced for v in m.verdicts)


def test_select_refuses_nothing_both_and_unknown_in_one_line() -> None:
    for bugs, every in (((), False), (("sglang#23773",), True), (("sglang#99",), False)):
        with pytest.raises(InputError) as exc:
            plan.select(bugs, every=every)
        assert "\n" not in str(exc.value)
    assert [r.bug for r in plan.select(("SGLANG#23773", "sglang#23773"), every=False)] == ["sglang#23773"]
