"""The fault-fired gate, one way for every fault (architecture §3.1, §3.3): every server fault the registry holds, on
a path with such a gate, gets it from its server's room, worded by its record or its path, with no table of fault
names beside the registry. The hole this closes: SGLang's transfer gate once returned with no gate for a fault
missing from its ``ACTS_ON`` table (``consistency/servers/sglang/transfer.py:134``), so a new transfer fault that
never fired would have passed green having tested nothing."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kvdoctor._exceptions import EXIT_GATE
from kvdoctor.consistency import gates
from kvdoctor.consistency.fault_gate import fault_fired_from, words
from kvdoctor.consistency.prepared import ConsistencyOptions, Prepared
from kvdoctor.consistency.result import ConsistencyResult, FaultReport, settled
from kvdoctor.consistency.runnable import ModelKind
from kvdoctor.consistency.servers import deployment
from kvdoctor.consistency.servers.sglang import deployment as sglang_room
from kvdoctor.consistency.servers.vllm import plan as deploy_vllm
from kvdoctor.core import faults, paths
from kvdoctor.core.faults import Fault, Needs, Role, StatePath, Target
from kvdoctor.engines import hook_log

LOGS = {"sglang": sglang_room.HOOK_LOG, "vllm": deploy_vllm.PLUGIN_LOG}  # each room's in-server log


def _green(server: str, name: str) -> ConsistencyResult:
    r = ConsistencyResult("m", "dense", "single", "cpu", True, {}, server=server, stand_in={"calls": []})
    tokens = gates.Gate("tokens", True, "passed", "16/16 identical")
    return settled(replace(r, fault=FaultReport(name, "pressured"), gates=[tokens]))


def _read(server: str, tmp_path: Path, name: str, *lines: str) -> ConsistencyResult:
    """The room's own reading of its in-server log (``Deployment.read_log``, as a run reads it after teardown)."""
    (tmp_path / LOGS[server]).write_text("".join(f"7 {line}\n" for line in lines), encoding="utf-8")
    o = ConsistencyOptions("m", server=server, inject=name)
    prepared = Prepared(o, {}, ModelKind("dense", False, False), None, False, 1000)
    return deployment(server).read_log(prepared, tmp_path, _green(server, name), lambda *_: None)


SERVER_FAULTS = [(f.server, f.name) for f in faults.select(target=Target.SERVER)]


def test_only_the_retraction_path_has_no_fault_fired_gate() -> None:
    """Every server fault has gate words (its own, its server's or its path's) but retraction's, whose faults the
    pressure gate and their backups and restores prove."""
    without = {f.path for f in faults.select(target=Target.SERVER) if words(f.name, f.server) is None}
    assert without <= {StatePath.RETRACTION}
    assert [p.path for p in paths.PATHS if p.acts_on is None] == [StatePath.RETRACTION]


@pytest.mark.parametrize(("server", "name"), SERVER_FAULTS)
def test_every_server_fault_that_never_fired_is_red_through_its_room(server: str, name: str, tmp_path: Path) -> None:
    said = words(name, server)
    red = _read(server, tmp_path, name, f"fault-installed {name} on its hook")
    fired = [g for g in red.gates if g.name == "fault-fired"]
    if said is None:  # a retraction fault: its backups and restores are its tally, the pressure gate its proof
        assert fired == [] and red.fault is not None and red.fault.installed
        return
    assert red.exit_code == EXIT_GATE and len(fired) == 1 and fired[0].reason == "no_teeth", red.gates
    assert said.absent in fired[0].message
    green = _read(
        server, tmp_path, name, f"fault-installed {name} on its hook", f"fault-fired {name} x", "fault-fired x"
    )
    gate = next(g for g in green.gates if g.name == "fault-fired")
    assert gate.passed and said.on.format(n=1) in gate.message and green.fault is not None
    assert (green.fault.installed, green.fault.restores) == (True, 1), "its own firings only"


def test_a_new_fault_on_a_gated_path_gets_its_gate_without_another_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A transfer fault registered without gate words (the hole: missing from the room's ``ACTS_ON``) is still gated,
    in its path's words."""
    new = Fault("drop-pd-kv", "sglang", Target.SERVER, StatePath.TRANSFER, Role.DECODE, (), "drops it", Needs.ANY)
    monkeypatch.setitem(faults._REGISTERED, "sglang", (*faults.select(server="sglang"), new))
    faults.faults.cache_clear()
    try:
        red = _read("sglang", tmp_path, new.name, "fault-installed drop-pd-kv on DecodeTransferQueue")
    finally:
        faults.faults.cache_clear()
    fired = [g for g in red.gates if g.name == "fault-fired"]
    assert len(fired) == 1, f"a transfer fault without its own words got no fault-fired gate: {red.gates}"
    transfer = paths.get(StatePath.TRANSFER).acts_on
    assert transfer is not None and not fired[0].passed and transfer.absent in fired[0].message


def test_a_fault_s_own_words_then_its_server_s_then_its_path_s() -> None:
    own = faults.get("drop-pd-state", server="sglang", target=Target.SERVER)
    assert own.acts_on is not None and words(own.name, "sglang") == own.acts_on
    radix = words("blank-state-on-hit", "sglang")
    assert radix is not None and "radix-cache hit" in radix.on, "SGLang words its prefix hits itself"
    assert words("drop-prefix", "vllm") == paths.get(StatePath.PREFIX_HIT).acts_on
    assert words("no-such-fault", "vllm") is None


def test_an_unjudged_run_counts_the_firings_and_gets_no_gate(tmp_path: Path) -> None:
    log_path = tmp_path / "hook.log"
    log_path.write_text("1 fault-installed swa-early-evict x\n1 fault-fired swa-early-evict y\n", encoding="utf-8")
    stopped = replace(_green("sglang", "swa-early-evict"), exit_code=3, exit_reason="server_exited")
    read = fault_fired_from(hook_log.read(log_path), stopped, "sglang")
    assert read.gates == stopped.gates and read.fault is not None and read.fault.restores == 1
