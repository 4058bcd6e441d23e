"""A bug's row passes only when its control is green and its subject red (or loud), each for the right reason:
every way a side can look right for the wrong reason is refused here."""

from __future__ import annotations

from dataclasses import replace

from kvdoctor.consistency.gates import Gate
from kvdoctor.core.replays import RECURRENT, Expect, Outcome, Replay
from kvdoctor.replay.verdict import Run, judge
from tests.replay import fakes

TRANSFER = Replay(
    "sglang#23773", "sglang", "lfm2-1.2b", "pd", "transfer", "drop-pd-state", Expect(Outcome.RED, RECURRENT)
)
LOUD = Replay(
    "sglang#33385", "sglang", "llama-3.1-8b", "pd", "preempt", "retract-raise", Expect(Outcome.LOUD, line="NotImpl")
)
OVERLAP = Replay(
    "kvdoctor#overlap",
    "sglang",
    "lfm2-1.2b",
    "pd",
    "preempt",
    None,
    Expect(Outcome.RED, RECURRENT),
    control_args=("--disable-overlap-schedule",),
)


def _judge(r: Replay, control: object, subject: object) -> object:
    return judge(r, Run(consistency=control), Run(consistency=subject))


def test_a_green_control_and_a_red_subject_reproduce_the_bug_with_its_first_divergence() -> None:
    v = _judge(TRANSFER, fakes.green("transfer"), fakes.red("transfer"))
    assert (v.status, v.control.verdict, v.subject.verdict) == ("reproduced", "green", "red")
    assert v.first_divergence == {
        "request": 2,
        "position": 5,
        "by": "token",
        "component": "conv_state",
        "source": "trace",
    }


def test_a_subject_red_by_its_logprobs_alone_names_where_they_first_drifted() -> None:
    """Every token equal, the logprobs beyond the threshold: the first divergence is the first drifting token."""
    drifting = [*fakes.gates("transfer", fired=True), Gate("logprobs", False, "logprob_drift", "drift")]
    first = {"request": 3, "position": 7, "dlogprob": 2e-3}
    subject = replace(fakes.result(drifting), logprob_drift={"requests": [3], "first": first})
    v = _judge(TRANSFER, fakes.green("transfer"), subject)
    assert (v.status, v.subject.verdict) == ("reproduced", "red")
    assert v.first_divergence == {
        "request": 3,
        "position": 7,
        "by": "logprobs",
        "component": " or ".join(TRANSFER.expect.components),
        "source": "expected",
    }


def test_a_control_without_the_scenario_s_proof_gate_is_not_green() -> None:
    """Green for the wrong reason: nothing proves a transfer happened (a run of another scenario, a gate renamed)."""
    v = _judge(TRANSFER, fakes.green("pressure"), fakes.red("transfer"))
    assert (v.status, v.control.verdict) == ("not-reproduced", "not-green")
    assert "no transfer gate" in v.control.reason


def test_a_control_whose_path_did_not_run_is_not_green() -> None:
    control = fakes.result(fakes.gates("transfer", failing="transfer"))
    v = _judge(TRANSFER, control, fakes.red("transfer"))
    assert v.control.verdict == "not-green" and "no teeth" in v.control.reason


def test_a_red_subject_whose_fault_never_fired_is_not_a_reproduction() -> None:
    v = _judge(TRANSFER, fakes.green("transfer"), fakes.red("transfer", fired=False))
    assert v.subject.verdict == "not-red" and v.status == "not-reproduced"


def test_a_red_subject_with_no_firing_counted_at_all_is_not_a_reproduction() -> None:
    unproven = fakes.red("transfer", fired=None)
    assert _judge(TRANSFER, fakes.green("transfer"), unproven).subject.verdict == "not-red"
    counted = fakes.fired_report(unproven)  # the retraction faults' own count stands in for the gate
    assert _judge(TRANSFER, fakes.green("transfer"), counted).subject.verdict == "red"


def test_a_subject_red_for_another_reason_than_its_tokens_is_not_red() -> None:
    subject = fakes.result(fakes.gates("transfer", tokens=False, fired=True, failing="sensitivity"))
    v = _judge(TRANSFER, fakes.green("transfer"), subject)
    assert v.subject.verdict == "not-red" and "another reason" in v.subject.reason


def test_a_red_attributed_to_another_component_is_not_the_bug() -> None:
    v = _judge(TRANSFER, fakes.green("transfer"), fakes.red("transfer", component="full_kv"))
    assert v.subject.verdict == "not-red" and "full_kv" in v.subject.reason


def test_a_red_the_run_did_not_attribute_reports_the_expectation_as_such() -> None:
    v = _judge(TRANSFER, fakes.green("transfer"), fakes.red("transfer", component=None))
    assert v.reproduced and v.first_divergence["source"] == "expected"


def test_a_green_subject_is_not_red() -> None:
    v = _judge(TRANSFER, fakes.green("transfer"), fakes.green("transfer"))
    assert (v.subject.verdict, v.status) == ("not-red", "not-reproduced")


def test_the_overlap_finding_needs_no_fault_and_its_workaround_green() -> None:
    v = _judge(OVERLAP, fakes.green(), fakes.red(fired=None))
    assert v.reproduced
    assert _judge(OVERLAP, fakes.red(fired=None), fakes.red(fired=None)).control.verdict == "not-green"


def test_a_loud_bug_needs_exit_3_with_the_server_s_own_line() -> None:
    assert _judge(LOUD, fakes.green(), fakes.fired_report(fakes.dead("decode exited: NotImplemented"))).reproduced
    wrong = _judge(LOUD, fakes.green(), fakes.fired_report(fakes.dead("decode exited: out of memory")))
    assert wrong.subject.verdict == "not-loud" and wrong.status == "not-reproduced"
    unseen = _judge(LOUD, fakes.green(), fakes.dead("decode exited: NotImplemented"))  # died, the fault never there
    assert unseen.subject.verdict == "not-loud" and "not seen installed" in unseen.subject.reason
    survived = _judge(LOUD, fakes.green(), fakes.red())
    assert survived.subject.verdict == "not-loud"


def test_a_deployment_that_failed_unexpectedly_is_no_verdict() -> None:
    v = _judge(TRANSFER, fakes.dead(), fakes.red("transfer"))
    assert (v.status, v.control.verdict) == ("deployment-failed", "deployment-failed")


def test_a_case_not_run_is_never_reproduced() -> None:
    trip = replace(TRANSFER, scenario="roundtrip", fault="null-source")
    v = judge(trip, Run(not_run="needs vLLM"), Run(not_run="needs vLLM"))
    assert (v.status, v.reproduced, v.subject.verdict) == ("not-run", False, "not-run")


def test_a_round_trip_red_on_rows_the_fault_does_not_own_is_not_red() -> None:
    from kvdoctor.core.faults import Target

    trip = replace(TRANSFER, scenario="roundtrip", fault="null-source", target=Target.ENGINE)
    control = Run(roundtrip=fakes.Roundtrip(True))
    matched = Run(roundtrip=fakes.Roundtrip(False, ["g1.conv_state"], True, ["g1.conv_state"]))
    assert judge(trip, control, matched).reproduced
    other = Run(roundtrip=fakes.Roundtrip(False, ["g0.k"], False, ["g1.conv_state"]))
    assert judge(trip, control, other).subject.verdict == "not-red"
    assert judge(trip, Run(roundtrip=fakes.Roundtrip(False, ["g0.k"])), matched).control.verdict == "not-green"


def test_a_loud_round_trip_needs_the_engine_s_own_words() -> None:
    from kvdoctor.core.faults import Target

    trip = Replay(
        "vllm#56701",
        "vllm",
        "gemma-3-12b",
        "in-process",
        "roundtrip",
        "swa-short-store",
        Expect(Outcome.LOUD, line="cannot serve"),
        Target.ENGINE,
    )
    control = Run(roundtrip=fakes.Roundtrip(True))
    assert judge(trip, control, Run(error="manager cannot serve the hit")).reproduced
    assert judge(trip, control, Run(error="out of memory")).subject.verdict == "not-loud"
    assert judge(trip, control, Run(roundtrip=fakes.Roundtrip(True))).subject.verdict == "not-loud"
    assert judge(trip, Run(error="cannot serve"), Run(error="cannot serve")).status == "deployment-failed"
