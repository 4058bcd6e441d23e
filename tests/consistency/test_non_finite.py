"""A logprob or count that is no finite number never passes a gate (issue 28, defect 3; pure logic, no server).

NaN compares False with everything: ``max()`` over a leading NaN is NaN and ``NaN > threshold`` is False, so one
null logprob at token 0 once hid every later drift, and a NaN in the reference made the threshold NaN.
"""

from __future__ import annotations

import json
import math

import pytest

from kvdoctor._exceptions import MalformedReply
from kvdoctor.consistency import gates, probe_vllm
from kvdoctor.consistency.client import parse, parse_completion
from kvdoctor.consistency.compare import Generation, against, diff, drift, noise_floor
from kvdoctor.consistency.report import json_document
from kvdoctor.consistency.result import ConsistencyResult
from kvdoctor.consistency.run import evaluate
from kvdoctor.consistency.workload import Workload
from kvdoctor.core.paths import ActsOn
from kvdoctor.deploy.metrics import MalformedMetric
from kvdoctor.report.serialize import dumps
from tests.schema_check import assert_valid

NAN, INF = float("nan"), float("inf")
REF = [list(range(10 * i, 10 * i + 16)) for i in range(8)]


def run(tokens: list[list[int]], logprob: float = -1.0) -> list[Generation]:
    return [Generation(tuple(t), tuple([logprob] * len(t)), tuple([0.2] * len(t))) for t in tokens]


def with_logprob(g: Generation, position: int, value: float) -> Generation:
    lp = list(g.logprobs)
    lp[position] = value
    return Generation(g.tokens, tuple(lp), g.margins)


def result() -> ConsistencyResult:
    return ConsistencyResult(
        "llama-3.1-8b",
        "dense",
        "single",
        "cpu",
        True,
        Workload().to_dict(),
        retractions={"reference": 0, "pressured": 3},
        retraction_source="metrics",
        stand_in={"used": True, "calls": []},
    )


def logprobs_gate(r: ConsistencyResult) -> gates.Gate:
    return next(g for g in r.gates if g.name == "logprobs")


# ---- the comparison ------------------------------------------------------------------------------------------


def test_a_null_at_token_0_no_longer_hides_a_later_drift() -> None:
    ref = run(REF)
    got = [Generation(g.tokens, tuple(x - 0.003 for x in g.logprobs), g.margins) for g in ref]
    got[3] = with_logprob(got[3], 0, NAN)  # the reply's null, as the parser reads it
    d = diff(3, ref[3], got[3])
    assert d.max_abs_dlogprob == pytest.approx(0.003)  # over the finite tokens: a number, never NaN
    assert [(x.run, x.request, x.position, x.value) for x in d.non_finite] == [("pressured", 3, 0, "null/NaN")]
    r = result()
    r = evaluate(r, ref, ref, got, stand_in_used=True)
    gate = logprobs_gate(r)
    assert not gate.passed and gate.reason == "malformed_reply" and r.exit_code == 1
    assert "the pressured run's request 3 at token 0 (null/NaN)" in gate.message
    assert "the finite ones drift in 8/8 requests too" in gate.message
    assert r.logprob_drift is not None and r.logprob_drift["requests"] == list(range(8))  # the drift is still seen


def test_a_null_logprob_alone_is_unknown_never_a_pass() -> None:
    ref = run(REF)
    got = list(ref)
    got[5] = with_logprob(ref[5], 9, NAN)
    r = result()
    r = evaluate(r, ref, ref, got, stand_in_used=True)
    assert r.identical == r.total  # every token is the reference's: only the malformed reply turns it red
    assert not logprobs_gate(r).passed and r.exit_reason == "malformed_reply"
    assert "request 5 at token 9" in logprobs_gate(r).message


def test_a_nan_in_the_reference_keeps_the_threshold_a_number_and_the_gate_red() -> None:
    ref = run(REF)
    ref[0] = with_logprob(ref[0], 0, NAN)  # the reference (and so its repeat, the same replies here)
    got = [Generation(g.tokens, tuple(x - 0.003 for x in g.logprobs), g.margins) for g in ref]
    floor = noise_floor(ref, ref)
    assert floor.max_abs_dlogprob == 0.0 and math.isfinite(drift(against(ref, got, floor), floor)["threshold"])
    r = result()
    r = evaluate(r, ref, ref, got, stand_in_used=True)
    gate = logprobs_gate(r)
    assert not gate.passed and gate.reason == "malformed_reply"
    assert "the reference run's request 0 at token 0" in gate.message


@pytest.mark.parametrize(("value", "spelled"), [(INF, "+Inf"), (-INF, "-Inf"), (NAN, "null/NaN")])
def test_every_non_finite_logprob_is_named_with_its_run_request_and_token(value: float, spelled: str) -> None:
    ref = run(REF)
    repeat = list(ref)
    repeat[2] = with_logprob(ref[2], 4, value)
    floor = noise_floor(ref, repeat)
    out = drift(against(ref, ref, floor), floor)
    assert out["non_finite"] == {
        "count": 1,
        "first": [{"run": "repeat", "request": 2, "position": 4, "value": spelled}],
    }
    assert floor.to_dict()["non_finite_logprobs"] == 1
    assert not gates.logprobs(out, len(ref), floor.max_abs_dlogprob).passed


def test_a_missing_logprob_is_malformed_too() -> None:
    ref = run(REF)
    got = list(ref)
    got[1] = Generation(ref[1].tokens, ref[1].logprobs[:10], ref[1].margins)  # tokens 10.. carry no logprob
    floor = noise_floor(ref, ref)
    out = drift(against(ref, got, floor), floor)
    assert out["non_finite"]["count"] == 6  # type: ignore[index]
    assert out["non_finite"]["first"][0] == {"run": "pressured", "request": 1, "position": 10, "value": "missing"}  # type: ignore[index]


def test_the_references_own_non_finite_logprob_is_counted_once() -> None:
    ref = run(REF)
    ref[4] = with_logprob(ref[4], 1, NAN)
    floor = noise_floor(ref, ref)  # both the reference and its repeat carry it (the same replies here)
    out = drift(against(ref, run(REF), floor), floor)  # the reference's, from both comparisons, once
    assert out["non_finite"]["count"] == 2  # type: ignore[index]
    assert [x["run"] for x in out["non_finite"]["first"]] == ["reference", "repeat"]  # type: ignore[index]


def test_a_divergence_excused_by_the_noise_floor_keeps_its_non_finite_logprobs() -> None:
    ref = run([[1, 2, 3, 4]])
    repeat = run([[1, 2, 9, 9]])  # the reference disagrees with itself at token 2
    got = [with_logprob(Generation((1, 2, 3, 7), (-1.0,) * 4, (0.2,) * 4), 1, NAN)]
    floor = noise_floor(ref, repeat)
    (d,) = against(ref, got, floor)
    assert d.within_noise and [x.position for x in d.non_finite] == [1]


def test_a_nan_margin_is_reported_as_unknown() -> None:
    d = diff(0, Generation((1, 2), (-1.0, -1.0), (0.2, NAN)), Generation((1, 3), (-1.0, -1.0), (0.2, 0.2)))
    assert d.diverged and d.ref_margin is None


def test_a_finite_runs_json_keeps_exactly_its_keys() -> None:
    """The rows' keys are a published contract: the non-finite record is no dataclass field, and the drift and
    noise-floor keys appear only when there is something to say."""
    r = result()
    r = evaluate(r, run(REF), run(REF), run(REF), stand_in_used=True)
    doc = json.loads(dumps(json_document(r)))
    assert set(doc["requests"][0]) == {
        "index",
        "ref_tokens",
        "got_tokens",
        "identical_prefix",
        "diverged",
        "position",
        "ref_token",
        "got_token",
        "ref_margin",
        "max_abs_dlogprob",
        "within_noise",
    }
    assert set(doc["logprob_drift"]) == {"threshold", "requests", "max"}
    assert "non_finite_logprobs" not in doc["noise_floor"]


def test_a_malformed_runs_json_is_valid_and_says_where() -> None:
    ref = run(REF)
    got = list(ref)
    got[6] = with_logprob(ref[6], 0, NAN)
    r = result()
    r = evaluate(r, ref, ref, got, stand_in_used=True)
    doc = assert_valid(json.loads(dumps(json_document(r))), "consistency")
    assert doc["exit_code"] == 1 and doc["exit_reason"] == "malformed_reply"
    assert doc["logprob_drift"]["non_finite"]["first"][0] == {
        "run": "pressured",
        "request": 6,
        "position": 0,
        "value": "null/NaN",
    }
    assert all(isinstance(row["max_abs_dlogprob"], float) for row in doc["requests"])


# ---- the gates: every number checked before it is compared ---------------------------------------------------


def test_the_logprobs_gate_is_red_when_its_own_numbers_are_not_finite() -> None:
    for numbers in ({"max": INF, "threshold": 1e-4}, {"max": 0.0, "threshold": NAN}, {"max": NAN, "threshold": 1e-4}):
        gate = gates.logprobs({**numbers, "requests": []}, 8, 0.0)
        assert not gate.passed and gate.reason == "malformed_reply", numbers
    assert not gates.logprobs({"max": 0.0, "threshold": 1e-4, "requests": []}, 8, NAN).passed
    assert gates.logprobs({"max": 0.0, "threshold": 1e-4, "requests": []}, 8, 0.0).passed


@pytest.mark.parametrize(("pressured", "reference"), [(NAN, 0), (3, NAN), (INF, 0), (-2, 0), (NAN, NAN)])
def test_a_count_that_is_no_number_is_unknown_in_the_pressure_gate(pressured: float, reference: float) -> None:
    gate = gates.pressure(pressured, reference, "metrics")  # type: ignore[arg-type]
    assert not gate.passed and gate.reason == "no_teeth" and "unknown" in gate.message and "not a count" in gate.message


def test_a_count_that_is_no_number_is_unknown_in_the_prefix_cache_gate() -> None:
    assert not gates.prefix_hits(NAN, 0, "metrics").passed  # type: ignore[arg-type]
    assert not gates.prefix_hits(3072, NAN, "metrics").passed  # type: ignore[arg-type]
    phase = {"requests": 8, "hit_requests": NAN}
    assert not gates.prefix_hits(3072, 0, "metrics", phase).passed  # type: ignore[arg-type]
    assert gates.prefix_hits(3072, 0, "metrics", {"requests": 8, "hit_requests": 8}).passed


def test_a_count_that_is_no_number_is_unknown_in_the_offload_gate() -> None:
    assert not gates.offload(NAN, None, "metrics").passed  # type: ignore[arg-type]
    assert not gates.offload(4096, NAN, "metrics").passed  # type: ignore[arg-type]
    assert not gates.offload(INF, None, "metrics").passed  # type: ignore[arg-type]
    assert gates.offload(4096, None, "metrics").passed


def test_vllm_counters_that_add_up_to_infinity_are_a_malformed_metric() -> None:
    """Two engines at 1e308 sum to +Inf: once ``int(inf)``, an OverflowError (a kvdoctor bug, exit 4)."""
    line = 'vllm:num_preemptions_total{{engine="{e}",model_name="m"}} 1e308\n'
    page = "# TYPE vllm:num_preemptions_total counter\n" + line.format(e=0) + line.format(e=1)
    with pytest.raises(MalformedMetric, match="not a count"):
        probe_vllm.from_prometheus(page)


def test_a_fault_that_fired_nan_times_never_fired() -> None:
    said = ActsOn("zeroed {n}", "nothing to zero")
    gate = gates.fault_fired("zero-state", True, NAN, None, said)  # type: ignore[arg-type]
    assert not gate.passed and gate.reason == "no_teeth"
    assert gates.fault_fired("zero-state", True, 2, None, said).passed


def test_a_nan_sensitivity_is_degenerate() -> None:
    assert not gates.sensitivity(NAN, 16.0).passed
    assert not gates.sensitivity(8.0, NAN).passed
    assert gates.sensitivity(8.0, 16.0).passed


# ---- the reply parsers -----------------------------------------------------------------------------------------

SGLANG = {
    "output_ids": [5, 9],
    "meta_info": {
        "output_token_logprobs": [[None, 5, None], [-2.0, 9, None]],
        "output_top_logprobs": [
            [[None, 5, None], [-1.75, 6, None], [-3.0, 7, None]],
            [[-2.0, 9, None], [NAN, 4, None]],
        ],
        "finish_reason": {"type": "length"},
    },
}


def test_sglangs_null_logprob_is_kept_for_the_comparison_to_name() -> None:
    g = parse(SGLANG)
    assert math.isnan(g.logprobs[0]) and g.logprobs[1] == -2.0
    assert g.margins == (1.25, None)  # a null or NaN among the top logprobs is left out, never a NaN margin
    assert [x.position for x in g.malformed_logprobs("pressured", 0)] == [0]


def test_vllms_nan_logprob_is_kept_and_a_string_is_refused() -> None:
    reply = {
        "choices": [
            {
                "finish_reason": "length",
                "logprobs": {
                    "tokens": ["token_id:11", "token_id:12"],
                    "token_logprobs": [NAN, -1.0],
                    "top_logprobs": [
                        {"token_id:11": NAN, "token_id:3": -2.0, "token_id:4": -2.5},
                        {"token_id:12": -1.0},
                    ],
                },
            }
        ]
    }
    g = parse_completion(reply)
    assert math.isnan(g.logprobs[0]) and g.margins == (0.5, None)
    reply["choices"][0]["logprobs"]["token_logprobs"] = ["-0.5", -1.0]  # type: ignore[index]
    with pytest.raises(MalformedReply, match="not a number"):
        parse_completion(reply)
