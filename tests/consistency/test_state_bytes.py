"""Which state a backup holds, from the tensors: kvdoctor.consistency.state_bytes over logs whose bytes the
server-side writer (kvdoctor.engines.sglang.digests.StateBytes) wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from kvdoctor.consistency import state_bytes  # noqa: E402
from kvdoctor.consistency.compare import RequestDiff  # noqa: E402
from kvdoctor.engines.sglang.digests import StateBytes, bytes_path, prompt_key  # noqa: E402

PROMPTS = [[4 + i, 5 + i, 6 + i] for i in range(3)]
P = 3  # prompt length
STEPS = 12  # the reference decodes positions P .. P + STEPS - 1


def _state(prompt: int, pos: int, noise: float = 0.0) -> dict[str, list[Any]]:
    """A request's recurrent state after POS positions: two components, every value distinct per position."""
    conv = torch.arange(6, dtype=torch.float32).reshape(2, 3) + 10.0 * pos + 1000.0 * prompt + noise
    temporal = torch.full((4,), float(pos) / 7.0 + prompt, dtype=torch.bfloat16)
    return {"conv_state": [conv], "temporal_state": [temporal]}


class _Log:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.kept = StateBytes(bytes_path(str(path)), 1 << 20)
        self.events: list[dict[str, Any]] = [{"event": "scheduler", "t": 0.0, "overlap": True}]
        self.t = 1.0

    def add(self, event: str, prompt: int, parts: dict[str, list[Any]] | None = None, **fields: Any) -> None:
        self.t += 1.0
        e = {"event": event, "t": self.t, "rid": f"r{prompt}", "prompt": prompt_key(PROMPTS[prompt]), **fields}
        if parts is not None:
            e["bytes"] = self.kept.keep(parts)
        self.events.append(e)

    def state(self, prompt: int, pos: int, retraction: int = 0, noise: float = 0.0) -> None:
        self.add("state", prompt, _state(prompt, pos, noise), pos=pos, retraction=retraction)

    def write(self) -> Path:
        self.path.write_text("".join(json.dumps(e) + "\n" for e in self.events), encoding="utf-8")
        return self.path


def _reference(tmp_path: Path) -> Path:
    ref = _Log(tmp_path / "digests-reference.jsonl")
    for prompt in range(len(PROMPTS)):
        for pos in range(P, P + STEPS):
            ref.state(prompt, pos)
    return ref.write()


def _retracted(log: _Log, prompt: int, kv: int, *, ahead: int, noise: float = 0.0) -> None:
    """PROMPT decoded to KV positions, backed up with the state after KV + AHEAD, resumed feeding KV again."""
    for pos in range(P, kv):
        log.state(prompt, pos, noise=noise)
    digests = {"conv_state": "cc:40"}  # attribution's seams (equal: the bytes moved intact)
    log.add(
        "backup", prompt, _state(prompt, kv + ahead), kv_tokens=kv, state_pos=kv + ahead, live=digests, copy=digests
    )
    log.add("restore", prompt, kv_tokens=kv, held=digests, live=digests)
    log.add(
        "forward", prompt, _state(prompt, kv + ahead), fed=kv, seed=77, outputs=kv - P + 1, kv_tokens=kv, live=digests
    )
    log.state(prompt, kv, retraction=1)


def _diff(index: int, position: int | None = None) -> RequestDiff:
    diverged = position is not None
    return RequestDiff(index, STEPS, STEPS, position if diverged else STEPS, diverged, position=position)


def test_a_backup_one_position_ahead_and_its_double_feed_are_read_from_the_tensors(tmp_path: Path) -> None:
    ref = _reference(tmp_path)
    press = _Log(tmp_path / "digests.jsonl")
    _retracted(press, 0, 8, ahead=1)  # the overlap finding's shape
    _retracted(press, 1, 9, ahead=0)  # a faithful round trip
    report = state_bytes.compare(press.write(), ref, PROMPTS, [_diff(0, 7), _diff(1), _diff(2)])
    assert report.kept and report.floor == 0.0 and report.floor_positions == (8 - P) + (9 - P)
    (ahead,) = next(r for r in report.requests if r.index == 0).cycles
    assert (ahead.backup.pos, ahead.backup.equal, ahead.kv_tokens) == (9, True, 8)
    assert ahead.backup.at["kv"] and ahead.backup.at["kv"] > 0  # the KV's own position is NOT what it holds
    assert ahead.components == ["conv_state", "temporal_state"]
    assert (ahead.fed, ahead.seed, ahead.output, ahead.resumed.pos, ahead.double_feed) == (8, 77, 5, 9, True)
    assert "position 8 fed twice" in ahead.sentence and "reference after 9 positions" in ahead.sentence
    (faithful,) = next(r for r in report.requests if r.index == 1).cycles
    assert (faithful.backup.pos, faithful.resumed.pos, faithful.double_feed) == (9, 9, False)
    assert "fed twice" not in faithful.sentence
    assert "1 hold the state of a position past their KV backup, 1 the KV backup's own" in report.summary
    assert "1 resumed forwards fed a position their state had already absorbed" in report.summary
    shown = state_bytes.lines(report, [0])
    assert shown[0].startswith("state bytes: 2 backups") and len(shown) == 2 and shown[1].startswith("request 0 ")


def test_equal_means_within_the_floor_this_run_measured(tmp_path: Path) -> None:
    """The pressured decode's states before any retraction differ from the reference's by 1e-3 (another batch
    shape): that is the floor, and a backup 1e-3 away from a position equals it. A state 1e-2 away (a second
    retraction, after a first double feed moved it) equals none but is still named: every other position is over
    ten times farther. One 5 away from two positions at once is near none."""
    ref = _reference(tmp_path)
    press = _Log(tmp_path / "digests.jsonl")
    _retracted(press, 0, 8, ahead=1, noise=1e-3)
    _retracted(press, 1, 9, ahead=1, noise=1e-2)
    press.add("backup", 2, _state(2, 6, noise=5.0), kv_tokens=6, state_pos=6, live={}, copy={})
    report = state_bytes.compare(press.write(), ref, PROMPTS, [_diff(0), _diff(1), _diff(2)])
    assert report.floor == pytest.approx(1e-2, rel=1e-2)  # request 1's states before its retraction count too
    by = {r.index: r.cycles[0] for r in report.requests}
    assert by[0].backup.equal and by[0].backup.pos == 9
    assert not by[2].backup.clear and "≈ (nothing near)" in by[2].sentence
    assert "1 near no reference position" in report.summary


def test_a_state_beyond_the_floor_is_named_only_when_no_other_position_is_near(tmp_path: Path) -> None:
    ref = _reference(tmp_path)
    press = _Log(tmp_path / "digests.jsonl")
    for pos in range(P, 8):
        press.state(0, pos, noise=1e-3)  # the floor: 1e-3
    digests = {"conv_state": "cc:40"}
    press.add("backup", 0, _state(0, 9, noise=2e-2), kv_tokens=8, state_pos=9, live=digests, copy=digests)
    press.add("restore", 0, kv_tokens=8, held=digests, live=digests)
    press.add("forward", 0, _state(0, 9, noise=2e-2), fed=8, seed=5, outputs=6, kv_tokens=8, live=digests)
    report = state_bytes.compare(press.write(), ref, PROMPTS, [_diff(0), _diff(1), _diff(2)])
    (cycle,) = report.requests[0].cycles
    assert not cycle.backup.equal and cycle.backup.clear and cycle.backup.pos == 9
    assert cycle.double_feed is True and "nearest to reference after 9 positions" in cycle.sentence
    assert "beyond the floor; the next nearest" in cycle.sentence


def test_the_floor_ignores_what_follows_a_retraction_or_a_diverging_token(tmp_path: Path) -> None:
    """After its first retraction or its first diverging token a request's state may differ by design: counting
    those positions would widen the floor until a wrong backup 'equals' a reference position."""
    ref = _reference(tmp_path)
    press = _Log(tmp_path / "digests.jsonl")
    _retracted(press, 0, 8, ahead=1)
    press.state(0, 10, retraction=1, noise=5.0)  # after the retraction: off by 5
    for pos in range(P, P + 8):  # request 2 diverges at its output 2 (position P + 2): later states are its own
        press.state(2, pos, noise=0.0 if pos <= P + 2 else 3.0)
    report = state_bytes.compare(press.write(), ref, PROMPTS, [_diff(0), _diff(1), _diff(2, 2)])
    assert report.floor == 0.0
    assert report.floor_positions == (8 - P) + 3


def test_a_state_over_the_limit_is_not_kept_and_says_why(tmp_path: Path) -> None:
    ref = _reference(tmp_path)
    press = _Log(tmp_path / "digests.jsonl")
    press.kept = StateBytes(bytes_path(str(press.path)), 16)  # smaller than one state
    press.state(0, P)
    report = state_bytes.compare(press.write(), ref, PROMPTS, [_diff(0), _diff(1), _diff(2)])
    assert not report.kept and "over the 64 KiB kept" in report.reason and "--shrink" in report.reason
    assert state_bytes.lines(report) == [f"state bytes: not compared ({report.reason})"]


def test_a_truncated_bytes_file_is_never_read_as_a_state(tmp_path: Path) -> None:
    ref = _reference(tmp_path)
    press = _Log(tmp_path / "digests.jsonl")
    _retracted(press, 0, 8, ahead=1)
    log = press.write()
    data = log.with_suffix(".bin")
    data.write_bytes(data.read_bytes()[:-48])  # the last two states (the resumed forward's, the next) cut short
    report = state_bytes.compare(log, ref, PROMPTS, [_diff(0), _diff(1), _diff(2)])
    (cycle,) = report.requests[0].cycles
    assert cycle.backup.pos == 9 and cycle.resumed is None and cycle.double_feed is None


def test_the_report_validates_against_the_published_schema(tmp_path: Path) -> None:
    from kvdoctor.consistency import attribution
    from kvdoctor.consistency.report import json_document
    from kvdoctor.consistency.result import ConsistencyResult
    from kvdoctor.consistency.workload import Workload
    from tests.schema_check import assert_valid

    ref = _reference(tmp_path)
    press = _Log(tmp_path / "digests.jsonl")
    _retracted(press, 0, 8, ahead=1)
    log = press.write()
    diffs = [_diff(0, 7), _diff(1), _diff(2)]
    trace = attribution.attribute(log, PROMPTS, diffs)
    trace.state_bytes = state_bytes.compare(log, ref, PROMPTS, diffs).to_dict()
    r = ConsistencyResult("lfm2-1.2b", "lfm2", "pd", "cpu", True, Workload().to_dict(), state_trace=trace)
    doc = assert_valid(json_document(r), "consistency")
    assert doc["state_trace"]["state_bytes"]["requests"][0]["cycles"][0]["double_feed"] is True


def test_a_backup_s_slot_taken_by_another_request_before_its_restore_is_counted(tmp_path: Path) -> None:
    """The CPU view hazard's window: request 1 runs on request 0's recurrent slot between request 0's backup and
    restore. Counted from the state events' slots; whether the held copy changed, from the digests."""
    ref = _reference(tmp_path)
    press = _Log(tmp_path / "digests.jsonl")
    for pos in range(P, 8):
        press.state(0, pos)
    press.add("backup", 0, _state(0, 8), kv_tokens=8, state_pos=8, mamba_slot=5, live={}, copy={"conv_state": "a:4"})
    press.add("state", 1, _state(1, 4), pos=4, retraction=0, mamba_slot=5)  # request 1 on slot 5
    press.add("restore", 0, kv_tokens=8, mamba_slot=7, held={"conv_state": "b:4"}, live={})
    press.add("forward", 0, _state(0, 8), fed=8, seed=3, outputs=6, kv_tokens=8, mamba_slot=7, live={})
    report = state_bytes.compare(press.write(), ref, PROMPTS, [_diff(0), _diff(1), _diff(2)])
    (cycle,) = report.requests[0].cycles
    assert (cycle.slot_reused, cycle.held_changed) == (True, True)
    assert "1 backups' slots ran another request before their restore, and 1 of those copies changed" in report.summary
