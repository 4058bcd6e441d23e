"""The fault-fired gate, made one way for every injected fault on every server.

A fault that never ran on what it acts on proves nothing: a run whose fault never fired would pass green having
tested nothing. So every fault kvdoctor injects inside a server logs ``fault-installed NAME ...`` once it is in
place and ``fault-fired NAME ...`` each time it changed something (``kvdoctor.engines.hook_log``: SGLang's site hook,
vLLM's plugin), and :func:`fault_fired_from` counts them from the servers' log: the fault report's ``installed`` and
``restores`` (its firings), and, on a judged run, the gate (red, ``no_teeth``, when it never fired; ``fault_failed``
when the server reported it failed).

Which faults get the gate, and how it words them, is the registry's: the fault's own record, else how its server
words its path (``kvdoctor.core.consistency_facts``), else its state path's record (``kvdoctor.core.paths``). No
table of fault names sits beside the registry, so a new fault on a gated path gets its gate without another line;
a path without a fault-fired gate (retraction: its faults are counted as the backups and restores through them,
and the pressure gate proves those ran) leaves the result as it is.
"""

from __future__ import annotations

from dataclasses import replace

from kvdoctor._exceptions import EXIT_GATE, EXIT_PASS
from kvdoctor.consistency import gates
from kvdoctor.consistency.result import Result, settled
from kvdoctor.core import faults as registry
from kvdoctor.core.consistency_facts import consistency_facts
from kvdoctor.core.faults import Target
from kvdoctor.core.paths import ActsOn, acts_on
from kvdoctor.engines.hook_log import EventLog

__all__ = ["FIRED", "INSTALLED", "fault_fired_from", "words"]

FIRED, INSTALLED = "fault-fired", "fault-installed"  # the servers' events: ``EVENT NAME detail``


def words(name: str, server: str) -> ActsOn | None:
    """How the fault-fired gate words the fault NAME (as typed: an old spelling stands for its fault) on SERVER;
    None when it gets no such gate (its path has none, or the registry does not know it)."""
    try:
        fault = registry.get(name, server=server, target=Target.SERVER)
    except KeyError:
        return None
    return acts_on(fault, consistency_facts(server).fault_words.get(fault.path))


def _of(name: str, details: list[str]) -> int:
    """How many of DETAILS are the fault NAME's (their first word)."""
    return sum(1 for d in details if d.split(" ", 1)[0] == name)


def fault_fired_from(log: EventLog, result: Result, server: str) -> Result:
    """RESULT with its injected fault's ``installed`` and firings (``restores``) counted from LOG (SERVER's hook
    log, cut to the run's bursts by the caller) and, when the run was judged, its fault-fired gate; RESULT as it is
    without a fault, or for a fault without that gate. The fault's ``refused`` (what the server said went wrong with
    it) is the room's, read before."""
    fault = result.fault
    said = words(fault.name, server) if fault is not None else None
    if fault is None or said is None:
        return result
    fired = _of(fault.name, log.details(FIRED))
    installed = _of(fault.name, log.details(INSTALLED)) > 0
    result = replace(result, fault=replace(fault, installed=installed, restores=fired))
    if result.exit_code not in (EXIT_PASS, EXIT_GATE):
        return result
    gate = gates.fault_fired(fault.name, installed, fired, fault.refused, said)
    return settled(replace(result, gates=[*result.gates, gate]))
