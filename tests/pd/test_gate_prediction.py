"""The two gates and the pre-launch retraction prediction."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from kvdoctor._exceptions import ConfigError
from kvdoctor.deploy import prediction
from kvdoctor.deploy.metrics import RetractionCount
from kvdoctor.pd import gate


def test_accuracy_gate_is_inclusive() -> None:
    assert gate.accuracy(0.80, 0.80).status == gate.PASSED
    failed = gate.accuracy(0.79, 0.80)
    assert failed.status == gate.FAILED and failed.reason == "accuracy_below_threshold"


@pytest.mark.parametrize(
    ("count", "allow", "status", "reason"),
    [
        (RetractionCount(3, "metrics"), False, gate.PASSED, ""),
        (RetractionCount(0, "metrics"), False, gate.FAILED, "no_retraction"),
        (RetractionCount(0, "log"), True, gate.SKIPPED, ""),
        (RetractionCount(None, "none"), False, gate.FAILED, "retraction_unknown"),
        (RetractionCount(None, "none"), True, gate.SKIPPED, ""),
    ],
)
def test_retraction_gate(count: RetractionCount, allow: bool, status: str, reason: str) -> None:
    result = gate.retraction(count, allow_none=allow)
    assert (result.status, result.reason) == (status, reason)


def test_peak_demand_and_verdict_from_the_flag() -> None:
    forecast = prediction.predict(
        "m",
        ["--max-total-tokens", "65536"],
        mean_prompt_chars=4000,
        max_new_tokens=512,
        parallel=128,
        num_questions=200,
    )
    assert forecast.prompt_tokens == 1000 and forecast.per_request_tokens == 1512
    assert forecast.peak_tokens == 128 * 1512
    assert forecast.capacity_source == "--max-total-tokens"
    assert forecast.retraction_expected is True


def test_few_questions_bound_the_concurrency() -> None:
    forecast = prediction.predict(
        "m", ["--max-total-tokens=65536"], mean_prompt_chars=400, max_new_tokens=100, parallel=128, num_questions=3
    )
    assert forecast.concurrency == 3 and forecast.retraction_expected is False
    assert "guard will probably fail" in forecast.message()


def test_unknown_capacity() -> None:
    forecast = prediction.predict("m", [], mean_prompt_chars=400, max_new_tokens=100, parallel=8, num_questions=None)
    assert forecast.capacity_tokens is None and forecast.retraction_expected is None


def test_default_pool_forces_retraction_but_fits_two_requests() -> None:
    assert prediction.default_pool_tokens(1000, 128_000) == 32_000
    assert prediction.default_pool_tokens(1000, 2_000) == 2048  # two requests, page-aligned


@pytest.fixture
def fake_analysis(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = types.ModuleType("kvdoctor.core.sglang.analysis")
    monkeypatch.setitem(sys.modules, "kvdoctor.core.sglang.analysis", module)
    return module


def test_capacity_prefers_the_core_sizing(fake_analysis: types.ModuleType) -> None:
    def analyze(model: str, argv: list[str]) -> SimpleNamespace:
        assert argv == ["--max-total-tokens", "65536"]
        sizing = SimpleNamespace(full_tokens=50_000, requests_fit=lambda tokens, window: 50_000 // tokens)
        return SimpleNamespace(
            sizing=sizing, spec=SimpleNamespace(sliding_window=None), backup=SimpleNamespace(backend="cpu_tensor")
        )

    fake_analysis.analyze = analyze  # type: ignore[attr-defined]
    forecast = prediction.predict(
        "m", ["--max-total-tokens", "65536"], mean_prompt_chars=400, max_new_tokens=100, parallel=8, num_questions=None
    )
    assert (forecast.capacity_tokens, forecast.backup_backend) == (50_000, "cpu_tensor")
    assert forecast.requests_fit == 50_000 // 200  # 100 prompt + 100 new tokens each
    assert forecast.retraction_expected is False


def test_capacity_falls_back_when_the_model_cannot_be_sized(
    fake_analysis: types.ModuleType,
) -> None:
    def analyze(model: str, argv: list[str]) -> None:
        raise ConfigError("no config.json")

    fake_analysis.analyze = analyze  # type: ignore[attr-defined]
    forecast = prediction.predict(
        "m", ["--max-total-tokens", "4096"], mean_prompt_chars=400, max_new_tokens=100, parallel=8, num_questions=None
    )
    assert (forecast.capacity_tokens, forecast.capacity_source) == (4096, "--max-total-tokens")


def test_real_core_sizing_of_a_bundled_model() -> None:
    decode = [
        "--disaggregation-mode",
        "decode",
        "--tp",
        "2",
        "--kv-cache-dtype",
        "mxfp8",
        "--max-total-tokens",
        "65536",
        "--base-gpu-id",
        "2",
        "--host",
        "127.0.0.1",
    ]
    forecast = prediction.predict(
        "inkling-small", decode, mean_prompt_chars=6000, max_new_tokens=512, parallel=128, num_questions=200
    )
    assert forecast.capacity_source == "kvdoctor inspect sizing"
    assert forecast.backup_backend == "cpu_tensor"  # SSM state: the Inkling test's backend
    assert forecast.retraction_expected is True
    # The binding pool is the SWA pool (0.1 of the full pool, each request holding its window).
    assert forecast.requests_fit is not None and forecast.requests_fit < forecast.capacity_tokens // 2012


def test_the_forecast_sentence_agrees_with_the_pool_that_limits() -> None:
    """The pd-eval default pool for one Inkling request: 0.5x of the full pool, yet the SWA pool
    (0.1 of it) cannot hold the request's window. The sentence once read "0 of 1 requests fit:
    retraction expected" beside the 0.5x ratio; it must say what limits and what that means."""
    per_request = 1121
    decode = [
        "--disaggregation-mode",
        "decode",
        "--max-total-tokens",
        str(prediction.default_pool_tokens(per_request, per_request)),
    ]
    forecast = prediction.predict(
        "inkling-small",
        decode,
        mean_prompt_chars=(per_request - 512) * 4,
        max_new_tokens=512,
        parallel=1,
        num_questions=1,
    )
    assert forecast.peak_tokens < forecast.capacity_tokens  # type: ignore[operator]
    assert forecast.requests_fit == 0 and forecast.swa_tokens is not None
    message = forecast.message()
    assert "retraction expected" not in message and "requests fit: retraction" not in message
    assert "not even one request" in message and f"the SWA pool of {forecast.swa_tokens:,} tokens" in message
    assert "the full pool alone would hold 1" in message


@pytest.mark.parametrize(
    ("fit", "capacity", "expect"),
    [
        (
            3,
            50_000,
            "3 of 8 requests in flight fit at once (the full pool alone would hold 8; the limit is the SWA "
            "pool of 600 tokens): retraction expected",
        ),
        (3, 600, "3 of 8 requests in flight fit at once: retraction expected"),
        (8, 50_000, "all 8 requests in flight fit at once, so retraction is unlikely"),
        (None, 50_000, "pool large enough that retraction is unlikely"),
        (None, 600, "retraction expected"),
    ],
)
def test_forecast_verdicts(fit: int | None, capacity: int, expect: str) -> None:
    forecast = prediction.Prediction(
        prompt_tokens=100,
        per_request_tokens=200,
        concurrency=8,
        peak_tokens=1600,
        capacity_tokens=capacity,
        capacity_source="test",
        requests_fit=fit,
        swa_tokens=600,
    )
    assert expect in forecast.message()
    assert forecast.retraction_expected is ("retraction expected" in expect)
