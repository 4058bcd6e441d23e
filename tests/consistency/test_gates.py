"""The verdict: red on divergence above the noise floor and whenever the guard has no teeth."""

from __future__ import annotations

import pytest

from kvdoctor.consistency import gates
from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.result import ConsistencyResult
from kvdoctor.consistency.run import evaluate


def run(tokens: list[list[int]]) -> list[Generation]:
    return [Generation(tuple(t), tuple([-1.0] * len(t)), tuple([0.2] * len(t))) for t in tokens]


REF = [list(range(10 * i, 10 * i + 16)) for i in range(8)]


def result(pressured: int | None = 3, reference: int | None = 0) -> ConsistencyResult:
    return ConsistencyResult(
        "m",
        "dense",
        "single",
        "cpu",
        True,
        {},
        retractions={"reference": reference, "pressured": pressured},
        retraction_source="metrics",
        stand_in={"used": True, "calls": []},
    )


def test_identical_tokens_with_retraction_pass() -> None:
    r = result()
    r = evaluate(r, run(REF), run(REF), run(REF), stand_in_used=True)
    assert r.exit_code == 0 and r.passed and r.identical == r.total == 8


def test_one_diverging_token_turns_the_run_red_and_names_it() -> None:
    got = [list(t) for t in REF]
    got[5][7] = 999
    r = result()
    r = evaluate(r, run(REF), run(REF), run(got), stand_in_used=True)
    assert r.exit_code == 1 and r.exit_reason == "diverged"
    first = r.first_divergence
    assert first is not None and (first.index, first.position, first.got_token) == (5, 7, 999)
    assert "request 5 at token 7" in r.gates[0].message


@pytest.mark.parametrize(
    ("pressured", "reference", "needle"),
    [(0, 0, "retracted nothing"), (4, 1, "reference retracted 1"), (None, 0, "unknown")],
)
def test_a_guard_without_teeth_is_red_even_when_every_token_matches(
    pressured: int | None, reference: int | None, needle: str
) -> None:
    r = result(pressured, reference)
    r = evaluate(r, run(REF), run(REF), run(REF), stand_in_used=True)
    assert r.exit_code == 1 and r.exit_reason == "no_teeth"
    assert needle in next(g for g in r.gates if g.name == "pressure").message


def test_degenerate_reference_output_is_red() -> None:
    cycle = [[930, 251] * 8 for _ in range(8)]
    r = result()
    r = evaluate(r, run(cycle), run(cycle), run(cycle), stand_in_used=True)
    assert r.exit_code == 1 and r.exit_reason == "degenerate"


def test_a_reference_that_disagrees_with_itself_too_often_is_red() -> None:
    noisy = [[*t[:3], 7777, *t[4:]] for t in REF[:4]] + REF[4:]  # half the requests differ on repeat
    r = result()
    r = evaluate(r, run(REF), run(noisy), run(REF), stand_in_used=True)
    assert r.exit_code == 1 and r.exit_reason == "noisy_reference"


def test_a_stand_in_call_is_red() -> None:
    gate = gates.stand_in(["sgl_kernel.copy_all_layer_kv_cache_cpu"], True)
    assert not gate.passed and gate.reason == "stand_in_called" and "copy_all_layer_kv_cache_cpu" in gate.message
    assert gates.stand_in([], True).passed


def test_identical_tokens_with_drifting_logprobs_are_red() -> None:
    ref = run(REF)
    got = [Generation(g.tokens, tuple(x - 0.003 for x in g.logprobs), g.margins) for g in ref]
    r = result()
    r = evaluate(r, ref, ref, got, stand_in_used=True)
    assert r.identical == r.total and r.exit_code == 1 and r.exit_reason == "logprob_drift"
    assert r.logprob_drift is not None and r.logprob_drift["requests"] == list(range(8))
    tiny = [Generation(g.tokens, tuple(x - 5e-6 for x in g.logprobs), g.margins) for g in ref]
    ok = result()
    ok = evaluate(ok, ref, ref, tiny, stand_in_used=True)  # 5e-6: float32 noise of a recompute, measured 6e-6
    assert ok.exit_code == 0


def test_the_pressure_gate_words_each_server_from_its_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang retracts, vLLM preempts; a server added through the tables alone brings its own words."""
    from kvdoctor.core import consistency_facts, servers
    from kvdoctor.core.servers import ServerFacts
    from tests.cli.test_consistency_server_words import FAKE

    assert "retracted nothing, so no state was ever backed up" in gates.pressure(0, 0, "m").message
    vllm = gates.pressure(0, 0, "m", **gates.pressure_words("vllm")).message
    assert (
        vllm
        == "guard has no teeth: the pressured run preempted nothing, so no request was ever resumed from preemption"
    )
    assert (
        gates.pressure_words("sglang") == gates.SGLANG_PRESSURE and gates.pressure_words("vllm") == gates.VLLM_PRESSURE
    )
    facts = ServerFacts("fakeserve", "FakeServe", "1.0", "fakeserve==1.0", "eviction", ("fakeserve",), "x:y", "x:y")
    monkeypatch.setitem(servers._REGISTERED, "fakeserve", facts)
    monkeypatch.setitem(consistency_facts.TABLE, "fakeserve", "tests.cli.test_consistency_server_words:FAKE")
    servers.facts.cache_clear()
    try:
        words = gates.pressure_words("fakeserve")
        assert words == {"noun": "eviction", "verb": "evicted", "consequence": FAKE.pressure_consequence}
        assert "the eviction count is unknown" in gates.pressure(None, 0, "m", **words).message
    finally:
        servers.facts.cache_clear()
