"""The sliding-window faults' gate on SGLang (``--inject swa-early-evict``, ``window_faults``).

A window fault acts on ``ScheduleBatch._evict_swa``, which SGLang calls only for a request decoding past its window by
its eviction interval (``SGLANG_SWA_EVICTION_INTERVAL``, 128 tokens by default, ``srt/environ.py:730``; the trigger is
``ScheduleBatch._swa_eviction_trigger``, ``srt/managers/schedule_batch.py:4063-4066``); a workload whose requests never
get that far would run the fault zero times and pass green having tested nothing. So the run counts the fault's
``fault-fired NAME ...`` lines of the site hook's log (as the fault's ``restores``: the evictions it moved) and gates
them: none is red (``no_teeth``), never a caught fault. Other faults, and runs not judged, are left as they are.
"""

from __future__ import annotations

from dataclasses import replace

from kvdoctor._exceptions import EXIT_GATE, EXIT_PASS
from kvdoctor.consistency import gates
from kvdoctor.consistency.result import ConsistencyResult, settled
from kvdoctor.core.faults import StatePath
from kvdoctor.engines import hook_log

__all__ = ["ACTS_ON", "fault_gate"]

# What a window fault acts on, as the fault-fired gate names it.
ACTS_ON = {
    "on": "freed in-window SWA slots at {n} window eviction(s)",
    "absent": "no request decoded past its sliding window by SGLang's eviction interval (SGLANG_SWA_EVICTION_INTERVAL, "
    "128 tokens by default: raise --max-new-tokens until prompt and new tokens pass the window by that much)",
}


def fault_gate(result: ConsistencyResult, log: hook_log.EventLog) -> ConsistencyResult:
    """RESULT with a sliding-window fault's firings counted and gated (red, ``no_teeth``, when it never fired)."""
    from kvdoctor.core import faults

    fault = result.fault
    if fault is None or fault.name not in faults.names(server="sglang", path=StatePath.SLIDING_WINDOW):
        return result
    fired = sum(1 for d in log.details("fault-fired") if d.split(" ", 1)[0] == fault.name)
    installed = any(d.split(" ", 1)[0] == fault.name for d in log.details("fault-installed"))
    result = replace(result, fault=replace(fault, installed=installed, restores=fired))
    if result.exit_code not in (EXIT_PASS, EXIT_GATE):
        return result
    gate = gates.fault_fired(fault.name, installed, fired, fault.refused, **ACTS_ON)
    return settled(replace(result, gates=[*result.gates, gate]))
