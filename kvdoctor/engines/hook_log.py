"""The one line format kvdoctor's in-server code (SGLang's site hook, vLLM's plugin) reports through, and the
environment variables that code is controlled by.

Each event is one line, ``PID EVENT DETAIL``, appended in one write to the file an environment variable names
(kvdoctor reads it back after the run: which fault installed, how often it fired). No variable, no file; a file
that cannot be written never disturbs the server. Imports nothing of either server.

``CONTROL_ENV`` names every variable kvdoctor's in-server code reads. kvdoctor owns them: the supervisor gives a
server only the ones the run itself sets (``kvdoctor.pd.supervisor``), so a ``KVDOCTOR_INJECT`` exported in the
user's shell cannot install a fault nobody asked for; and a fault event in a log of a run without ``--inject``
(:func:`faults`) makes the verdict unknown, never a finding against the server.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

__all__ = ["CONTROL_ENV", "append", "faults"]

CONTROL_ENV = frozenset(
    {
        "KVDOCTOR_INJECT",  # SGLang site hook (engines/sglang/server_hooks.py): the fault to install
        "KVDOCTOR_PATCHES",  # SGLang site hook: the CPU enablers to apply
        "KVDOCTOR_DIGEST_LOG",  # SGLang site hook: where the state trace goes
        "KVDOCTOR_HOOK_LOG",  # SGLang site hook: this format
        "KVDOCTOR_STANDIN_LOG",  # the CPU stand-in of sgl_kernel (engines/sglang/cpu_shims)
        "KVDOCTOR_VLLM_INJECT",  # vLLM plugin (engines/vllm/server_plugin.py): the fault to install
        "KVDOCTOR_VLLM_PLUGIN_LOG",  # vLLM plugin: this format
    }
)
FAULT_EVENT = "fault-"  # every event of an installed, firing, refused or failed fault starts so
VLLM_LOADED = "loaded"  # the vLLM plugin's first line in each process: ``loaded FAULT`` or ``loaded -``


def append(env_var: str, event: str, detail: str = "") -> None:
    """Append ``PID EVENT DETAIL`` to the file ENV_VAR names (nothing when unset or unwritable)."""
    path = os.environ.get(env_var)
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()} {event} {detail}".rstrip() + "\n")
    except OSError:
        pass


def faults(lines: Iterable[str]) -> list[str]:
    """Every line of LINES (a log in this format) that says a fault was asked for, armed, installed or fired
    inside a server (``EVENT DETAIL``, the pid left out), in order."""
    found: list[str] = []
    for line in lines:
        _pid, _, rest = line.partition(" ")
        event, _, detail = rest.partition(" ")
        asked = event == VLLM_LOADED and detail.strip() not in ("", "-")
        if event.startswith(FAULT_EVENT) or asked:
            found.append(rest.strip())
    return found
