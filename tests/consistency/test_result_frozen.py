"""``ConsistencyResult`` is frozen, like every other result (issue 29): nothing changes a result once made; each step
that judges it (``evaluate``, a server's in-server log, ``settled``) returns a new one, its input left as it was."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.gates import Gate
from kvdoctor.consistency.result import ConsistencyResult, FaultReport, Stopwatch, settled
from kvdoctor.consistency.run import evaluate
from kvdoctor.consistency.scenarios.offload import OffloadResult
from kvdoctor.consistency.scenarios.prefix_cache import PrefixCacheResult
from kvdoctor.consistency.servers.sglang import deployment as sglang_room
from kvdoctor.consistency.servers.vllm import deployment as vllm_room
from kvdoctor.consistency.servers.vllm import plan as deploy_vllm

REF = [Generation(tuple(range(i, i + 16)), (-1.0,) * 16, (0.5,) * 16) for i in range(8)]


def _result(cls: type[ConsistencyResult] = ConsistencyResult, **fields: object) -> ConsistencyResult:
    return cls("m", "dense", "single", "cpu", True, {}, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("cls", [ConsistencyResult, PrefixCacheResult, OffloadResult])
def test_every_scenarios_result_refuses_an_assignment(cls: type[ConsistencyResult]) -> None:
    r = _result(cls)
    for name in ("exit_code", "gates", "warnings", "fault", "timeline"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(r, name, None)


def test_a_fault_report_and_a_timeline_refuse_an_assignment() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        FaultReport("drop-kv", "pressured").installed = True  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Stopwatch().timeline.cpus = 0  # type: ignore[misc]


def test_the_stopwatchs_timeline_is_what_it_had_recorded_when_read() -> None:
    watch = Stopwatch()
    before = watch.timeline
    watch.record("prepare", 0.0)
    assert before.phases == [] and [s.name for s in watch.timeline.phases] == ["prepare"]


def test_evaluate_returns_the_judged_result_and_leaves_its_input_unjudged() -> None:
    r = _result(retractions={"reference": 0, "pressured": 3}, retraction_source="metrics")
    judged = evaluate(r, REF, REF, REF, stand_in_used=False)
    assert (judged.exit_code, judged.exit_reason, judged.identical, judged.total) == (0, "passed", 8, 8)
    assert (r.exit_reason, r.gates, r.requests, r.noise_floor) == ("not_run", [], [], None)
    assert type(evaluate(_result(PrefixCacheResult), REF, REF, REF, stand_in_used=False)) is PrefixCacheResult


def test_settled_returns_a_new_result() -> None:
    r = _result(gates=[Gate("tokens", False, "diverged", "1/8 diverge")])
    assert (settled(r).exit_code, settled(r).exit_reason, r.exit_reason) == (1, "diverged", "not_run")


def test_reading_a_servers_log_returns_a_new_result(tmp_path: Path) -> None:
    (tmp_path / deploy_vllm.PLUGIN_LOG).write_text("1 loaded drop-kv\n1 fault-installed drop-kv x\n")
    (tmp_path / sglang_room.HOOK_LOG).write_text("1 fault-installed drop-kv\n1 fault-restore drop-kv\n")
    for read in (vllm_room.read_plugin_log, sglang_room.read_hook_logs):
        fault = FaultReport("drop-kv", "pressured")
        r = _result(fault=fault, gates=[Gate("tokens", True, "passed", "8/8")], exit_code=0, stand_in={"calls": []})
        got = read(tmp_path, r)
        assert got.fault is not None and got.fault.installed and got is not r
        assert r.fault is fault and not fault.installed and r.stand_in == {"calls": []}
