"""``--scenario transfer`` on SGLang without a server: the plan (pools, which role gets a fault and KVDOCTOR_ARM,
the observer), the refusals (exit 2 before any work), the transfer gate, the evidence read from the site hook log,
the transfer faults' fault-fired gate, and a dead server's message (``retract-raise``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kvdoctor._exceptions import EXIT_DEPLOYMENT, EXIT_GATE, InputError
from kvdoctor.consistency import deploy, gates, run
from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.deploy import Deployment
from kvdoctor.consistency.fault_gate import fault_fired_from
from kvdoctor.consistency.report import json_document
from kvdoctor.consistency.result import ConsistencyResult, FaultReport, settled
from kvdoctor.consistency.scenarios.transfer import TransferDoc, TransferResult
from kvdoctor.consistency.servers.sglang import died, transfer
from kvdoctor.consistency.servers.sglang.deployment import part
from kvdoctor.consistency.workload import Workload
from kvdoctor.deploy.plan import flag_value
from kvdoctor.engines import hook_log
from tests.schema_check import assert_valid

ARM = "/run/armed"


def plan(inject: str | None = None, *, scenario: str = "transfer") -> Deployment:
    o = deploy.DeployOptions(
        model_dir="/m",
        topology="pd",
        device="cpu",
        workload=Workload(),
        has_recurrent=True,
        stand_in_dir="/shim",
        site_hook_dir="/hook",
        inject=inject,
        arm_file=ARM,
        prefill_faults=transfer.prefill_faults(inject),
        scenario=part(scenario).plan(run.ConsistencyOptions("/m", topology="pd", scenario=scenario)),
    )
    return deploy.build(o, [1, 2, 3, 4, 5, 6])


def injected(d: Deployment) -> dict[str, tuple[str | None, str | None]]:
    return {
        s.role: (s.env.get("KVDOCTOR_INJECT"), s.env.get("KVDOCTOR_ARM")) for s in d.steps if "KVDOCTOR_INJECT" in s.env
    }


def test_under_transfer_both_decodes_are_roomy_and_every_server_observes_the_transfer() -> None:
    d = plan()
    assert d.pressured_pool == d.reference_pool == deploy.pools(Workload())[0]
    assert flag_value(d.step("decode-pressured").argv, "--max-total-tokens") == str(d.reference_pool)
    assert d.step("prefill").env["KVDOCTOR_PATCHES"] == "mooncake-host-indices,transfer-observer"
    for role in ("decode-reference", "decode-pressured"):
        assert d.step(role).env["KVDOCTOR_PATCHES"] == "transfer-observer"
    assert injected(d) == {} and d.injected_role is None
    preempt = plan(scenario="preempt")
    assert preempt.pressured_pool < preempt.reference_pool
    assert "KVDOCTOR_PATCHES" not in preempt.step("decode-pressured").env


def test_a_prefill_fault_goes_into_the_shared_prefill_armed_by_the_run() -> None:
    d = plan("drop-pd-state")
    assert injected(d) == {"prefill": ("drop-pd-state", ARM)}
    assert d.injected_role == "prefill" and d.arm_file == ARM


def test_a_decode_transfer_fault_goes_into_the_pressured_decode_only() -> None:
    d = plan("clear-pd-state")
    assert injected(d) == {"decode-pressured": ("clear-pd-state", ARM)}
    assert d.injected_role == "decode-pressured"


def test_several_faults_each_go_to_their_own_role() -> None:
    d = plan("drop-pd-state,clear-pd-state")
    assert injected(d) == {"prefill": ("drop-pd-state", ARM), "decode-pressured": ("clear-pd-state", ARM)}
    assert d.injected_role == "prefill, decode-pressured"
    assert injected(plan("retract-raise", scenario="preempt")) == {"decode-pressured": ("retract-raise", ARM)}


@pytest.mark.parametrize(
    ("model", "kw", "says"),
    [
        ("lfm2-1.2b", {"topology": "single"}, "--scenario transfer needs --topology pd"),
        ("lfm2-1.2b", {"inject": "missing-mamba"}, "acts on the retraction path"),
        ("lfm2-1.2b", {"inject": "retract-raise"}, "acts on the retraction path"),
        ("lfm2-1.2b", {"inject": "drop-pd-state", "scenario": "preempt"}, "run it with --scenario transfer"),
        ("llama-3.1-8b", {"inject": "drop-pd-state"}, "needs recurrent (conv/temporal) state"),
        ("llama-3.1-8b", {"inject": "clear-pd-state"}, "needs recurrent (conv/temporal) state"),
        ("lfm2-1.2b", {"server": "vllm", "topology": "single"}, "runs on --server sglang only"),
    ],
)
def test_what_cannot_show_the_transfer_is_refused_before_any_work(
    model: str, kw: dict[str, str], says: str, tmp_path: Path
) -> None:
    o = run.ConsistencyOptions(
        model, shrink=True, output_dir=tmp_path / "out", **{"topology": "pd", "scenario": "transfer", **kw}
    )  # type: ignore[arg-type]
    with pytest.raises(InputError, match=says.replace("(", r"\(").replace(")", r"\)")):
        run.prepare(o)
    assert not (tmp_path / "out").exists()


def test_the_transfer_scenario_prepares_lfm2_over_pd_and_llama_without_a_fault() -> None:
    for model, inject in (("lfm2-1.2b", "drop-pd-state"), ("lfm2-1.2b", "clear-pd-state"), ("llama-3.1-8b", None)):
        o = run.ConsistencyOptions(model, shrink=True, topology="pd", scenario="transfer", inject=inject)
        assert run.prepare(o).prompts


DOC = TransferDoc(requests=4, recurrent=True, sent=4, state_sent=4, committed=4, source="site hook log")


@pytest.mark.parametrize(
    ("doc", "retracted", "passed", "says"),
    [
        (DOC, (0, 0), True, "4/4 sent by the prefill (4 with their recurrent state), 4/4 committed"),
        ({**DOC, "sent": 0, "state_sent": 0, "committed": 0}, (0, 0), False, "transfer path did not run for every"),
        ({**DOC, "state_sent": 3}, (0, 0), False, "3 with their recurrent state"),
        ({**DOC, "committed": 2}, (0, 0), False, "2/4 committed"),
        ({**DOC, "committed": None}, (0, 0), False, "transfer counts are unknown"),
        ({**DOC, "sent": float("nan")}, (0, 0), False, "not a count"),
        (DOC, (2, 0), False, "pressured decode retracted 2"),
        (DOC, (0, 1), False, "the reference 1"),
        (DOC, (None, 0), False, "retraction count is unknown"),
        ({**DOC, "recurrent": False, "state_sent": None}, (0, 0), True, "4/4 sent by the prefill, 4/4 committed"),
    ],
)
def test_the_transfer_gate(doc: TransferDoc, retracted: tuple[int | None, int | None], passed: bool, says: str) -> None:
    gate = gates.transfer(doc, retracted, "metrics")
    assert (gate.name, gate.passed, gate.reason) == ("transfer", passed, "passed" if passed else "no_teeth")
    assert says in gate.message


def _gens(n: int = 4) -> list[Generation]:
    return [Generation(tuple(range(10 * i, 10 * i + 16)), (-1.0,) * 16, (0.2,) * 16) for i in range(n)]


def transfer_result(doc: TransferDoc = DOC, pressured: int | None = 0) -> TransferResult:
    return TransferResult(
        "lfm2-1.2b",
        "lfm2",
        "pd",
        "cpu",
        True,
        Workload(requests=4).to_dict(),
        retractions={"reference": 0, "pressured": pressured},
        retraction_source="metrics",
        stand_in={"used": True, "calls": []},
        transfer=doc,
    )


def test_evaluate_puts_the_transfer_gate_in_the_pressure_gate_s_place() -> None:
    judged = run.evaluate(transfer_result(), _gens(), _gens(), _gens(), stand_in_used=True)
    names = [g.name for g in judged.gates]
    assert "transfer" in names and "pressure" not in names
    assert judged.passed and "4/4 requests transferred" in judged.summary_line()
    red = run.evaluate(transfer_result(pressured=3), _gens(), _gens(), _gens(), stand_in_used=True)
    assert red.exit_code == EXIT_GATE and red.exit_reason == "no_teeth"
    doc = assert_valid(json_document(red), "consistency")
    assert doc["scenario"] == "transfer" and doc["transfer"]["committed"] == 4


def _log(path: Path, *lines: str) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def test_the_evidence_counts_the_last_burst_s_distinct_rooms(tmp_path: Path) -> None:
    log = _log(
        tmp_path / "site-hook.log",
        "1 observing MooncakeKVManager.send_aux",
        "0 case reference",
        "1 transfer-sent room=9 rc=0",  # the reference's: not this burst's
        "0 case pressured",
        *(f"1 transfer-sent room={r} rc=0" for r in (1, 2, 3, 3)),
        "1 transfer-sent room=4 rc=-1",  # a failed send is no transfer
        *(f"1 transfer-state room={r} rc=0" for r in (1, 2)),
        *(f"2 transfer-committed room={r}" for r in (1, 2, 3)),
    )
    prepared = run.prepare(run.ConsistencyOptions("lfm2-1.2b", shrink=True, topology="pd", scenario="transfer"))
    prepared = replace(prepared, prompts=prepared.prompts[:4])
    doc = transfer.counted(prepared, log)
    assert (doc["requests"], doc["sent"], doc["state_sent"], doc["committed"]) == (4, 3, 2, 3)
    unmarked = transfer.counted(prepared, _log(tmp_path / "bare.log", "1 transfer-sent room=1 rc=0"))
    assert unmarked["sent"] is None  # without the burst's case line nothing is counted as its


def _fault_result(name: str) -> ConsistencyResult:
    r = transfer_result()
    return settled(replace(r, fault=FaultReport(name, "prefill"), gates=[gates.Gate("tokens", True, "passed", "ok")]))


def test_a_transfer_fault_that_never_fired_turns_the_run_red(tmp_path: Path) -> None:
    quiet = hook_log.read(_log(tmp_path / "a.log", "7 fault-installed drop-pd-state on MooncakeKVManager"))
    r = fault_fired_from(quiet, _fault_result("drop-pd-state"), "sglang")
    assert r.gates[-1].name == "fault-fired" and not r.passed and r.exit_reason == "no_teeth"
    fired = hook_log.read(
        _log(tmp_path / "b.log", "7 fault-installed drop-pd-state on X", "8 fault-fired drop-pd-state room=1")
    )
    ok = fault_fired_from(fired, _fault_result("drop-pd-state"), "sglang")
    assert ok.passed and ok.fault is not None and ok.fault.installed
    assert (
        fault_fired_from(quiet, _fault_result("missing-mamba"), "sglang").gates == _fault_result("missing-mamba").gates
    )


def test_a_dead_server_s_message_leads_with_its_own_error_and_the_retractions(tmp_path: Path) -> None:
    decode = tmp_path / "decode-pressured.log"
    decode.write_text(
        "[2026-12-04 DP0 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "schedule_batch.py", line 2118, in offload_kv_cache\n'
        "NotImplementedError: MHATokenToKVPool does not support get_cpu_copy (kvdoctor --inject retract-raise)\n"
        "Killed\n",
        encoding="utf-8",
    )
    prefill = tmp_path / "prefill.log"
    prefill.write_text("INFO all good\n", encoding="utf-8")
    hook = _log(tmp_path / "site-hook.log", "5 fault-installed retract-raise", "5 fault-offload retract-raise")
    r = replace(
        transfer_result(),
        exit_code=EXIT_DEPLOYMENT,
        exit_reason="server_exited",
        message="router-pressured exited with code 1; last lines of x",
        logs={"prefill": str(prefill), "decode-pressured": str(decode)},
        fault=FaultReport("retract-raise", "decode-pressured"),
    )
    head = died.explained(r, hook).message.splitlines()[0]
    assert head.startswith("decode-pressured died: NotImplementedError: MHATokenToKVPool does not support")
    assert "1 retraction backup(s) begun (kvdoctor's site hook), 0 retraction(s) logged by SGLang" in head
    assert died.explained(replace(r, logs={"prefill": str(prefill)}), hook).message == r.message  # no error: as is
