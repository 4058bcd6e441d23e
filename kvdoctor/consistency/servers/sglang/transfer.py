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
gate (:func:`kvdoctor.consistency.fault_gate.fault_fired_from`), so a fault that never fired cannot pass as a caught
one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvdoctor._exceptions import InputError
from kvdoctor.consistency import deploy
from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.prepared import ConsistencyOptions, Prepared
from kvdoctor.consistency.result import ConsistencyResult
from kvdoctor.consistency.scenarios.transfer import TransferDoc, TransferResult
from kvdoctor.consistency.servers import Notify
from kvdoctor.consistency.servers.sglang.part import SglangPart
from kvdoctor.core import faults as registry
from kvdoctor.core.faults import Role, Target
from kvdoctor.engines import fault_list, hook_log

__all__ = ["PART", "Transfer", "counted", "prefill_faults"]

SENT, STATE, COMMITTED = "transfer-sent", "transfer-state", "transfer-committed"  # transfer_faults' events
OBSERVER = "transfer-observer"  # the site hook's patch that logs them (kvdoctor.engines.sglang.transfer_faults)
_ROOM = re.compile(r"\broom=(\S+)")
_RC = re.compile(r"\brc=(-?\d+)")


def _faults(inject: str | None) -> list[registry.Fault]:
    return [registry.get(n, server="sglang", target=Target.SERVER) for n in fault_list.decode(inject)]


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


def counted(prepared: Prepared, hook_log_path: Path) -> TransferDoc:
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


class Transfer(SglangPart):
    """SGLang's part of ``--scenario transfer``."""

    name = "transfer"

    def check(self, o: ConsistencyOptions) -> None:
        """``--scenario transfer`` needs ``--topology pd`` (exit 2): a single server transfers nothing."""
        if o.topology != "pd":
            raise InputError(
                "--scenario transfer needs --topology pd: only a prefill/decode deployment sends a request's KV and "
                "state from the prefill to the decode (srt/disaggregation/mooncake/conn.py:1943)"
            )

    def needs(self, name: str, scenario: str) -> str:
        """A transfer fault runs under ``--scenario transfer`` only: under retraction it is confounded by it (LFM2
        over PD is red there by itself)."""
        return (
            f"--inject {name} acts on the PD transfer: run it with --scenario transfer --topology pd "
            "(under retraction a recurrent-state model over PD is red by itself: the overlap finding)"
        )

    def refuses(self, name: str) -> str:
        """Nothing retracts under ``transfer``, so a retraction fault would never fire."""
        return (
            f"--inject {name} acts on the retraction path, and nothing retracts under --scenario transfer "
            "(both decodes are roomy): use --scenario preempt"
        )

    def plan(self, o: ConsistencyOptions) -> deploy.ScenarioPlan:
        """Both decodes roomy (nothing retracts); every PD server runs the observer."""
        return deploy.ScenarioPlan(roomy_subject=True, patches=(OBSERVER,))

    def record(
        self,
        result: ConsistencyResult,
        prepared: Prepared,
        evidence: Mapping[str, Mapping[str, Any]],
        got: list[Generation],
        say: Notify,
        site_log: Path,
    ) -> tuple[ConsistencyResult, dict[str, Any]]:
        """RESULT with the transfer's evidence, read from the site hook's log right after the burst."""
        assert isinstance(result, TransferResult)
        return replace(result, transfer=counted(prepared, site_log)), {}


PART = Transfer()
