"""pd-eval never passes on a number that is none (issue 28, defect 3): a NaN or infinite retraction count,
accuracy or logprob, and a decode pool of 0 tokens (whose ratio once raised ZeroDivisionError, exit 4)."""

from __future__ import annotations

import pytest

from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.result import ConsistencyResult
from kvdoctor.consistency.run import evaluate
from kvdoctor.consistency.workload import Workload
from kvdoctor.deploy import metrics, plan, prediction
from kvdoctor.deploy.metrics import RetractionCount
from kvdoctor.pd import gate, tokens
from kvdoctor.pd import report as pd_report
from kvdoctor.pd.run import PdEvalOptions
from tests.schema_check import assert_valid

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("allow", [False, True])
@pytest.mark.parametrize("value", [NAN, INF, -1])
def test_a_retraction_count_that_is_no_count_is_red_even_when_none_is_allowed(value: float, allow: bool) -> None:
    """``nan > 0`` read as "no retraction" (let through by --allow-no-retraction) and ``inf > 0`` as a pass."""
    result = gate.retraction(RetractionCount(value, "metrics"), allow_none=allow)  # type: ignore[arg-type]
    assert result.status == gate.FAILED and result.reason == "retraction_unknown"
    assert "not a count" in result.message


@pytest.mark.parametrize(("score", "threshold"), [(INF, 0.8), (NAN, 0.8), (0.9, NAN), (0.9, -INF)])
def test_an_accuracy_that_is_no_number_fails(score: float, threshold: float) -> None:
    assert gate.accuracy(score, threshold).status == gate.FAILED


def test_a_decode_pool_of_0_tokens_says_nothing_fits() -> None:
    forecast = prediction.Prediction(10, 1131, 128, 144768, 0, "--max-total-tokens")
    assert "decode pool 0 tokens (from --max-total-tokens): not even one request of 1,131 tokens fits" in (
        forecast.message()
    )


def test_a_null_logprob_is_red_through_pd_evals_tokens_oracle() -> None:
    prefill = plan.Step("prefill", ("x", "--disaggregation-bootstrap-port", "8998"), "http://127.0.0.1:1", "/health")
    r = ConsistencyResult(
        "llama-3.1-8b",
        "dense",
        "pd",
        "cpu",
        True,
        Workload(requests=4).to_dict(),
        retractions={"reference": 0, "pressured": 5},
        retraction_source="metrics",
        stand_in={"used": True, "log": "x", "calls": []},
        deployment={"steps": [prefill.to_dict()]},
        run_dir="/tmp/run",
        wall_s=12.0,
    )
    ref = [Generation(tuple(range(i, i + 20)), tuple([-1.0] * 20), tuple([0.1] * 20)) for i in range(4)]
    got = [Generation(g.tokens, (NAN, *(x - 0.003 for x in g.logprobs[1:])), g.margins) for g in ref]
    r = evaluate(r, ref, ref, got, stand_in_used=True)
    result = tokens.to_result(PdEvalOptions(model="llama-3.1-8b", oracle="tokens", shrink=True), "generic", r)
    doc = assert_valid(pd_report.document(result), "pd-eval")
    assert (doc["verdict"], doc["exit_code"], doc["exit_reason"]) == ("fail", 1, "malformed_reply")
    logprobs = next(g for g in result.gates if g.name == "logprobs")
    assert logprobs.status == gate.FAILED and "request 0 at token 0" in logprobs.message


def test_finite_samples_that_add_up_to_infinity_are_a_malformed_metric() -> None:
    """Two data-parallel groups at 1e308 sum to +Inf: once ``int(inf)``, an OverflowError (exit 4)."""
    line = 'sglang:num_retracted_requests_total{{engine_type="decode",dp_rank="{dp}",tp_rank="0"}} 1e308\n'
    page = "# TYPE sglang:num_retracted_requests_total counter\n" + line.format(dp=0) + line.format(dp=1)
    with pytest.raises(metrics.MalformedMetric, match="is \\+Inf, not a count"):
        metrics.from_prometheus(page)
