"""``--scenario transfer`` on SGLang: every request crosses the PD transfer, and the faults on it.

Under ``--topology pd`` one prefill serves both deployments; under ``transfer`` both decodes get the roomy pool
(:mod:`kvdoctor.consistency.deploy`), so nothing retracts: LFM2 over PD is red under decode retraction by itself (the
overlap finding), and a retraction would back the state up and restore it, confounding what the transfer did. The
evidence is kvdoctor's observer inside the servers (:mod:`kvdoctor.engines.sglang.transfer_faults`): per bootstrap
room, the prefill's send (``send_aux``), its state send (``maybe_send_extra``) and the pressured decode's commit,
read from the site hook log after the pressured burst's ``case`` line (``kvdoctor.engines.hook_log.mark``); the
transfer gate (:func:`kvdoctor.consistency.gates.transfer`) takes the pressure gate's place.

A transfer fault runs on the role its record names (``drop-pd-state`` on the prefill, ``clear-pd-state`` on the
pressured decode), armed for the pressured burst only; its ``fault-fired`` events are counted by the fault-fired
gate, so a fault that never fired cannot pass as a caught one.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from kvdoctor._exceptions import EXIT_GATE, EXIT_PASS, InputError
from kvdoctor.consistency import gates
from kvdoctor.consistency.prepared import ConsistencyOptions, Prepared
from kvdoctor.consistency.result import ConsistencyResult, TransferDoc, TransferResult, settled
from kvdoctor.consistency.scenario import TRANSFER
from kvdoctor.core import faults as registry
from kvdoctor.core.faults import Role, StatePath, Target
from kvdoctor.engines import hook_log

__all__ = ["check", "check_fault", "evidence", "fault_gate", "prefill_faults", "record"]

SENT, STATE, COMMITTED = "transfer-sent", "transfer-state", "transfer-committed"  # transfer_faults' events
_ROOM = re.compile(r"\broom=(\S+)")
_RC = re.compile(r"\brc=(-?\d+)")
# How the fault-fired gate names what each transfer fault acted on.
ACTS_ON = {
    "drop-pd-state": {
        "on": "reported {n} request(s)' recurrent state sent without sending it (prefill)",
        "absent": "the prefill sent no request's state while it was armed",
    },
    "clear-pd-state": {
        "on": "cleared the transferred recurrent state of {n} request(s) after the commit (pressured decode)",
        "absent": "the pressured decode committed no transfer while it was armed",
    },
}


def _faults(inject: str | None) -> list[registry.Fault]:
    return [registry.get(n, server="sglang", target=Target.SERVER) for n in (inject or "").split(",") if n]


def check(o: ConsistencyOptions) -> None:
    """``--scenario transfer`` needs ``--topology pd`` (exit 2): a single server transfers nothing."""
    if o.scenario == TRANSFER and o.topology != "pd":
        raise InputError(
            "--scenario transfer needs --topology pd: only a prefill/decode deployment sends a request's KV and "
            "state from the prefill to the decode (srt/disaggregation/mooncake/conn.py:1943)"
        )


def check_fault(o: ConsistencyOptions) -> None:
    """A transfer fault runs under ``--scenario transfer`` only, a retraction fault never there (exit 2): a transfer
    fault under retraction is confounded by it (LFM2 over PD is red there by itself), and nothing retracts under
    ``transfer``, so a retraction fault would never fire."""
    for fault in _faults(o.inject):
        on_transfer = fault.path is StatePath.TRANSFER
        if on_transfer and o.scenario != TRANSFER:
            raise InputError(
                f"--inject {fault.name} acts on the PD transfer: run it with --scenario transfer --topology pd "
                "(under retraction a recurrent-state model over PD is red by itself: the overlap finding)"
            )
        if not on_transfer and o.scenario == TRANSFER:
            raise InputError(
                f"--inject {fault.name} acts on the retraction path, and nothing retracts under --scenario transfer "
                "(both decodes are roomy): use --scenario preempt"
            )


def prefill_faults(inject: str | None) -> tuple[str, ...]:
    """The injected faults whose record puts them on the prefill (the rest run on the pressured decode)."""
    return tuple(f.name for f in _faults(inject) if f.role is Role.PREFILL)


def _last_case(log: hook_log.EventLog) -> list[hook_log.Event]:
    """The events after the last ``case`` line: the burst just measured (none without one)."""
    events = list(log.events)
    marks = [i for i, e in enumerate(events) if e.name == hook_log.CASE]
    return events[marks[-1] + 1 :] if marks else []


def _rooms(events: list[hook_log.Event], name: str) -> int:
    """Distinct bootstrap rooms of the events NAME whose call succeeded (no rc, or rc=0)."""
    rooms = set()
    for e in events:
        room, rc = _ROOM.search(e.detail), _RC.search(e.detail)
        if e.name == name and room and (rc is None or rc.group(1) == "0"):
            rooms.add(room.group(1))
    return len(rooms)


def evidence(prepared: Prepared, hook_log_path: Path) -> TransferDoc:
    """What the observer counted during the burst just measured (read right after it: every send and commit of a
    request is logged before its reply leaves the decode); unknown (None) without the burst's ``case`` line."""
    log = hook_log.read(hook_log_path)
    marked = any(e.name == hook_log.CASE for e in log.events)
    events = _last_case(log)
    recurrent = prepared.kind.has_recurrent

    def count(name: str) -> int | None:
        return _rooms(events, name) if marked else None

    return TransferDoc(
        requests=len(prepared.prompts),
        recurrent=recurrent,
        sent=count(SENT),
        state_sent=count(STATE) if recurrent else None,
        committed=count(COMMITTED),
        source=f"kvdoctor's observer in the site hook log ({hook_log_path.name})" + ("" if marked else ", unmarked"),
    )


def record(result: ConsistencyResult, prepared: Prepared, hook_log_path: Path) -> ConsistencyResult:
    """RESULT with the transfer's evidence (a :class:`TransferResult` only; any other result is returned as is)."""
    if not isinstance(result, TransferResult):
        return result
    return replace(result, transfer=evidence(prepared, hook_log_path))


def fault_gate(result: ConsistencyResult, log: hook_log.EventLog) -> ConsistencyResult:
    """A transfer fault must have fired (``fault-fired NAME``) in the run's bursts, else the run tested nothing:
    the fault-fired gate, red (``no_teeth``) when it never fired."""
    fault = result.fault
    if fault is None or fault.name not in ACTS_ON or result.exit_code not in (EXIT_PASS, EXIT_GATE):
        return result
    fired = sum(1 for d in log.details("fault-fired") if d.split(" ", 1)[0] == fault.name)
    installed = any(d.split(" ", 1)[0] == fault.name for d in log.details("fault-installed"))
    gate = gates.fault_fired(fault.name, installed, fired, fault.refused, **ACTS_ON[fault.name])
    return settled(replace(result, fault=replace(fault, installed=installed), gates=[*result.gates, gate]))
