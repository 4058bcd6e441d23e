"""A fault that ran inside a server of a run without ``--inject`` is never the server's bug: the verdict is red and
unknown, and the state trace cites none of SGLang's lines (issue 28, defect 1's defence in depth)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kvdoctor.consistency import attribution
from kvdoctor.consistency.gates import Gate
from kvdoctor.consistency.result import ConsistencyResult, FaultReport, settled
from kvdoctor.consistency.servers.sglang import deployment as sglang_room
from kvdoctor.consistency.servers.vllm import deployment as vllm_room
from kvdoctor.consistency.servers.vllm import plan as deploy_vllm
from kvdoctor.consistency.workload import Workload
from tests.consistency.test_attribution import PROMPTS, _cycle, _diff, _write

SGLANG_FAULT = [
    "101 patched MooncakeKVSender.supports_host_tensor_indices=False",
    "202 fault-armed drop-kv on Req.offload_kv_cache",
    "202 fault-installed drop-kv",
    "202 fault-offload drop-kv",
    "202 fault-restore drop-kv",
]
VLLM_FAULT = ["301 loaded drop-kv", "302 loaded drop-kv", "302 fault-installed drop-kv x._update_states"]


def _green(topology: str = "pd", server: str = "sglang") -> ConsistencyResult:
    """A run whose comparison passed: what the logs say is all that can turn it."""
    result = ConsistencyResult(
        "llama-3.1-8b",
        "llama",
        topology,
        "cpu",
        True,
        Workload().to_dict(),
        server=server,
        gates=[Gate("tokens", True, "passed", "16/16 identical")],
        stand_in={"used": True, "calls": []},
    )
    return settled(result)


@pytest.mark.parametrize("diverged", [False, True])
def test_a_fault_in_the_site_hook_log_of_a_run_without_inject_is_red_and_unknown(
    tmp_path: Path, diverged: bool
) -> None:
    """Whatever else the gates say (the fault's divergence, measured live: 8/16), the reason is the fault."""
    (tmp_path / sglang_room.HOOK_LOG).write_text("\n".join(SGLANG_FAULT) + "\n")
    result = _green()
    if diverged:
        result = settled(
            replace(result, gates=[Gate("tokens", False, "diverged", "8/16 requests diverge"), *result.gates[1:]])
        )
    result = sglang_room.read_hook_logs(tmp_path, result)
    assert (result.exit_code, result.exit_reason) == (1, attribution.UNREQUESTED)
    assert result.message.startswith("a fault nobody asked for ran inside the servers (fault-armed drop-kv")


def test_a_fault_in_the_vllm_plugin_log_of_a_run_without_inject_is_red_and_unknown(tmp_path: Path) -> None:
    (tmp_path / deploy_vllm.PLUGIN_LOG).write_text("\n".join(VLLM_FAULT) + "\n")
    result = _green(server="vllm")
    result = vllm_room.read_plugin_log(tmp_path, result)
    assert (result.exit_code, result.exit_reason) == (1, attribution.UNREQUESTED)


@pytest.mark.parametrize("log", [["101 patched x", "202 digests-armed y"], []])
def test_a_clean_log_leaves_a_green_run_green(tmp_path: Path, log: list[str]) -> None:
    (tmp_path / sglang_room.HOOK_LOG).write_text("".join(line + "\n" for line in log))
    (tmp_path / deploy_vllm.PLUGIN_LOG).write_text("301 loaded -\n")
    for read, server in ((sglang_room.read_hook_logs, "sglang"), (vllm_room.read_plugin_log, "vllm")):
        result = read(tmp_path, _green(server=server))
        assert (result.exit_code, result.exit_reason) == (0, "passed")


def test_a_fault_asked_for_is_judged_by_its_own_gate_not_this_one(tmp_path: Path) -> None:
    (tmp_path / sglang_room.HOOK_LOG).write_text("\n".join(SGLANG_FAULT) + "\n")
    result = replace(_green(), fault=FaultReport("drop-kv", "decode-pressured"))
    result = sglang_room.read_hook_logs(tmp_path, result)
    assert attribution.UNREQUESTED not in {g.reason for g in result.gates}
    assert result.fault.installed and result.fault.restores == 1


def test_the_state_trace_blames_no_sglang_line_for_a_fault_nobody_asked_for(tmp_path: Path) -> None:
    log = _write(tmp_path / "d.jsonl", _cycle(0, 1.0, restored={"full_kv": "bb:100", "conv_state": "cc:40"}))
    blamed = attribution.attribute(log, PROMPTS, [_diff(0, True, 3)])
    assert blamed.finding and blamed.finding["cite"], "control: without a fault the trace cites SGLang"
    event = attribution.unrequested_fault(SGLANG_FAULT, None)
    assert event == "fault-armed drop-kv on Req.offload_kv_cache"
    trace = attribution.attribute(log, PROMPTS, [_diff(0, True, 3)], unrequested=event)
    t = trace.requests[0]
    assert t.verdict == "restore_differs" and t.cite == [] and t.why == "" and "nobody asked for" in t.detail
    assert trace.finding and trace.finding["cite"] == [] and trace.finding["unrequested"] == event
    assert trace.finding["sentence"].startswith("unknown: a fault nobody asked for")
    assert "schedule_batch.py" not in " ".join(trace.lines())


def test_with_inject_the_fault_in_the_log_is_expected() -> None:
    assert attribution.unrequested_fault(SGLANG_FAULT, "drop-kv") is None
    assert attribution.unrequested_gates(SGLANG_FAULT, "drop-kv") == []


# One launch, two cases (kvdoctor.consistency.run.run_cases): both faults installed at start-up, each case's burst
# after its own ``case`` line.
CASES_LOG = [
    "101 fault-armed drop-kv on Req.offload_kv_cache",
    "101 fault-installed clear-pd-state on DecodeTransferQueue._commit_transfer_to_req",
    "0 case reference",
    "0 case reference-repeat",
    "0 case pressured:no-fault",
    "0 case pressured:drop-kv",
    "101 fault-installed drop-kv",
    "101 fault-offload drop-kv",
    "101 fault-restore drop-kv",
    "101 fault-fired clear-pd-state room=3 slot=1",
]
REFERENCE = ("reference", "reference-repeat")


def test_a_control_among_cases_is_not_red_for_the_faults_its_launch_installed(tmp_path: Path) -> None:
    """Start-up installed every case's fault; the control's own burst fired none: green."""
    (tmp_path / sglang_room.HOOK_LOG).write_text("\n".join(CASES_LOG) + "\n")
    result = sglang_room.read_hook_logs(tmp_path, _green(), (*REFERENCE, "pressured:no-fault"))
    assert (result.exit_code, result.exit_reason) == (0, "passed")


def test_a_fault_firing_in_a_control_s_burst_is_red_and_unknown(tmp_path: Path) -> None:
    """Remove the per-burst reading and the drop-kv case's firings would pass as the control's: red here."""
    log = [line for line in CASES_LOG if line != "0 case pressured:drop-kv"]  # drop-kv fired in the control's burst
    (tmp_path / sglang_room.HOOK_LOG).write_text("\n".join(log) + "\n")
    result = sglang_room.read_hook_logs(tmp_path, _green(), (*REFERENCE, "pressured:no-fault"))
    assert (result.exit_code, result.exit_reason) == (1, attribution.UNREQUESTED)


def test_a_case_counts_only_its_own_fault_s_events(tmp_path: Path) -> None:
    (tmp_path / sglang_room.HOOK_LOG).write_text("\n".join(CASES_LOG) + "\n")
    result = replace(_green(), fault=FaultReport("drop-kv", "decode-pressured"))
    result = sglang_room.read_hook_logs(tmp_path, result, (*REFERENCE, "pressured:drop-kv"))
    assert result.fault.installed and (result.fault.backups, result.fault.restores) == (1, 1)
    other = replace(_green(), fault=FaultReport("clear-pd-state", "decode-pressured"))
    other = sglang_room.read_hook_logs(tmp_path, other, (*REFERENCE, "pressured:no-fault"))
    assert other.fault.installed and (other.fault.backups, other.fault.restores) == (0, 0)  # drop-kv's not counted
