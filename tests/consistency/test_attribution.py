"""The state trace joined with the token comparison: each seam's disagreement is named, with its component,
seam and SGLang's source; a round trip is proven per component; a request never retracted is named so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvdoctor.consistency import attribution
from kvdoctor.consistency.compare import RequestDiff
from kvdoctor.engines.sglang.digests import prompt_key

PROMPTS = [[4 + i, 5 + i, 6 + i] for i in range(4)]
KV = "aa:100"
CONV = "cc:40"


def _diff(index: int, diverged: bool, position: int | None = None) -> RequestDiff:
    return RequestDiff(index, 8, 8, position if diverged else 8, diverged, position=position)


def _cycle(
    index: int,
    t: float,
    *,
    kv_tokens: int = 20,
    state_pos: int | None = 20,
    copy: dict[str, str] | None = None,
    held: dict[str, str] | None = None,
    restored: dict[str, str] | None = None,
    forward: dict[str, str] | None = None,
    fed: int | None = None,
) -> list[dict[str, Any]]:
    live = {"full_kv": KV, "conv_state": CONV}
    copy = dict(live) if copy is None else copy
    base = {"rid": f"r{index}", "prompt": prompt_key(PROMPTS[index]), "kv_tokens": kv_tokens}
    return [
        {**base, "event": "backup", "t": t, "live": live, "copy": copy, "state_pos": state_pos},
        {
            **base,
            "event": "restore",
            "t": t + 1,
            "held": dict(copy) if held is None else held,
            "live": restored or copy,
        },
        {
            **base,
            "event": "forward",
            "t": t + 2,
            "live": forward or restored or copy,
            "fed": kv_tokens if fed is None else fed,
        },
    ]


def _write(path: Path, events: list[dict[str, Any]], *, overlap: bool = True, warmup: bool = True) -> Path:
    lines = [{"event": "scheduler", "t": 0.0, "overlap": overlap}]
    if warmup:  # the warm-up request shares prompt 0: the marker cuts it off
        lines += _cycle(0, 0.1, state_pos=99)
        lines.append({"event": "burst", "name": "pressured", "t": 0.5})
    path.write_text("".join(json.dumps(e) + "\n" for e in lines + events), encoding="utf-8")
    return path


def test_a_state_backed_up_ahead_of_its_kv_under_the_overlap_schedule_is_named_with_sglangs_lines(
    tmp_path: Path,
) -> None:
    events = _cycle(0, 1.0, kv_tokens=20, state_pos=21) + _cycle(2, 5.0)
    log = _write(tmp_path / "d.jsonl", events)
    diffs = [_diff(0, True, 3), _diff(1, True, 9), _diff(2, False), _diff(3, False)]
    trace = attribution.attribute(log, PROMPTS, diffs)
    by = {r.index: r for r in trace.requests}
    assert set(by) == {0, 1, 2}  # 3: identical and never retracted, nothing to say
    ahead = by[0]
    assert (ahead.verdict, ahead.component, ahead.seam, ahead.retractions) == (
        "state_ahead",
        "conv_state",
        "backup 1",
        1,
    )
    assert "after 21 positions, the KV backup 20" in ahead.detail and "fed position 20" in ahead.detail
    assert any("srt/disaggregation/decode.py:3189-3218" in c for c in ahead.cite)
    assert any("batch_result_processor.py:1021-1026" in c for c in ahead.cite)
    assert by[1].verdict == "not_retracted" and by[2].verdict == "round_trip"
    assert "full_kv, conv_state" in by[2].detail
    lines = trace.lines()
    assert "retracted 1×; conv_state first disagrees at backup 1" in lines[1]
    assert "never retracted" in lines[2]
    assert trace.finding and trace.finding["verdict"] == "state_ahead" and trace.finding["component"] == "conv_state"
    assert trace.complete and trace.backups == trace.restores == trace.forwards == 2  # the warm-up's are cut


def test_without_the_overlap_schedule_the_same_gap_cites_only_the_backup(tmp_path: Path) -> None:
    log = _write(tmp_path / "d.jsonl", _cycle(0, 1.0, kv_tokens=20, state_pos=21), overlap=False)
    t = attribution.attribute(log, PROMPTS, [_diff(0, True, 3)]).requests[0]
    assert t.verdict == "state_ahead" and t.cite == [str(attribution.OFFLOAD)]


@pytest.mark.parametrize(
    ("kwargs", "verdict", "component", "seam"),
    [
        ({"copy": {"full_kv": KV}}, "backup_lost", "conv_state", "backup 1"),  # the copy left the state behind
        ({"copy": {"full_kv": KV, "conv_state": "cc:0"}}, "backup_lost", "conv_state", "backup 1"),
        ({"held": {"full_kv": "ab:100", "conv_state": CONV}}, "held_changed", "full_kv", "restore 1"),
        ({"restored": {"full_kv": KV, "conv_state": "dd:40"}}, "restore_differs", "conv_state", "restore 1"),
        ({"forward": {"full_kv": KV, "conv_state": "ee:40"}}, "rewritten", "conv_state", "forward 1"),
        ({"fed": 19}, "fed_mismatch", "full_kv", "forward 1"),
        ({"state_pos": 19}, "state_behind", "conv_state", "backup 1"),
    ],
)
def test_each_seam_names_its_first_disagreeing_component(
    tmp_path: Path, kwargs: dict[str, Any], verdict: str, component: str, seam: str
) -> None:
    log = _write(tmp_path / "d.jsonl", _cycle(0, 1.0, **kwargs))
    t = attribution.attribute(log, PROMPTS, [_diff(0, True, 3)]).requests[0]
    assert (t.verdict, t.component, t.seam) == (verdict, component, seam)
    assert t.cite and t.cite[0].startswith("sglang/srt/")


def test_the_second_retraction_is_named_when_the_first_made_the_round_trip(tmp_path: Path) -> None:
    events = _cycle(0, 1.0) + _cycle(0, 5.0, restored={"full_kv": KV, "conv_state": "dd:40"})
    t = attribution.attribute(_write(tmp_path / "d.jsonl", events), PROMPTS, [_diff(0, True, 3)]).requests[0]
    assert t.retractions == 2 and t.seam == "restore 2"


def test_with_a_fault_injected_the_disagreement_is_the_faults_not_sglangs(tmp_path: Path) -> None:
    log = _write(tmp_path / "d.jsonl", _cycle(0, 1.0, copy={"full_kv": KV}))
    trace = attribution.attribute(log, PROMPTS, [_diff(0, True, 3)], injected="missing-mamba")
    t = trace.requests[0]
    assert t.verdict == "backup_lost" and t.cite == [] and "--inject missing-mamba" in t.detail
    assert trace.finding and trace.finding["injected"] == "missing-mamba" and trace.finding["cite"] == []


def test_a_missing_or_failed_trace_is_never_a_proof(tmp_path: Path) -> None:
    missing = attribution.attribute(tmp_path / "none.jsonl", PROMPTS, [_diff(0, True, 3)])
    assert not missing.recorded and not missing.complete and "none recorded" in missing.lines()[0]
    cut = _cycle(0, 1.0)[:2]  # backed up and restored, but its next forward never traced
    log = _write(tmp_path / "d.jsonl", cut)
    t = attribution.attribute(log, PROMPTS, [_diff(0, False)])
    assert t.requests[0].verdict == "incomplete" and not t.complete
    failed = attribution.attribute(
        _write(tmp_path / "e.jsonl", _cycle(0, 1.0)), PROMPTS, [_diff(0, False)], failure="x"
    )
    assert failed.requests[0].verdict == "round_trip" and not failed.complete and "INCOMPLETE: x" in failed.lines()[0]


def test_the_state_trace_validates_against_the_published_schema(tmp_path: Path) -> None:
    from kvdoctor.consistency.report import json_document
    from kvdoctor.consistency.result import ConsistencyResult
    from kvdoctor.consistency.workload import Workload
    from tests.schema_check import assert_valid

    log = _write(tmp_path / "d.jsonl", _cycle(0, 1.0, kv_tokens=20, state_pos=21) + _cycle(2, 5.0))
    trace = attribution.attribute(log, PROMPTS, [_diff(0, True, 3), _diff(1, True, 9), _diff(2, False)])
    r = ConsistencyResult("lfm2-1.2b", "lfm2", "pd", "cpu", True, Workload().to_dict(), state_trace=trace)
    doc = assert_valid(json_document(r), "consistency")
    assert doc["state_trace"]["finding"]["component"] == "conv_state"


def test_a_case_s_trace_reads_only_its_own_burst(tmp_path: Path) -> None:
    """One launch, two cases: each case's events follow its own burst marker; without BURST the last one's."""
    path = tmp_path / "d.jsonl"
    lines = [{"event": "scheduler", "t": 0.0, "overlap": False}]
    lines += [{"event": "burst", "name": "pressured:no-fault", "t": 1.0}, *_cycle(0, 1.1)]
    lines += [{"event": "burst", "name": "pressured:drop-kv", "t": 2.0}, *_cycle(1, 2.1), *_cycle(2, 2.2)]
    path.write_text("".join(json.dumps(e) + "\n" for e in lines), encoding="utf-8")
    control, _ = attribution.read_events(path, "pressured:no-fault")
    faulted, _ = attribution.read_events(path, "pressured:drop-kv")
    last, _ = attribution.read_events(path)
    traced = [e for e in control if e["event"] != "scheduler"]
    assert traced == _cycle(0, 1.1) and control[0]["event"] == "scheduler"
    assert [e for e in faulted if e["event"] != "scheduler"] == [*_cycle(1, 2.1), *_cycle(2, 2.2)]
    assert last == faulted
