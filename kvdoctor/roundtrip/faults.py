"""The faults ``roundtrip --inject`` takes, every server's, as one enum that imports nothing heavy.

kvdoctor's model and ``--engine sglang`` reproduce SGLang's known silent failures; ``--engine vllm`` wraps vLLM's
offloading worker (acted on in ``kvdoctor.engines.vllm.roundtrip``). The lists are read from the fault registry
(``kvdoctor.core.faults.roundtrip_names``), server by server. Typer lists :class:`InjectName` in ``--help`` and
refuses a typo while it parses; :func:`check_fault` refuses another server's fault (exit 2, one line) before
anything is imported.
"""

from __future__ import annotations

from enum import Enum

from kvdoctor._exceptions import InputError
from kvdoctor.core import faults
from kvdoctor.core.servers import Server, servers

__all__ = ["InjectName", "check_fault"]

InjectName = Enum(  # type: ignore[misc]  # the functional API: one member per fault, value = its spelling
    "InjectName",
    [(n.upper().replace("-", "_"), n) for n in dict.fromkeys(n for s in servers() for n in faults.roundtrip_names(s))],
    type=str,
)


def check_fault(fault: str | None, *, server: Server | str) -> None:
    """Exit 2 when FAULT is another server's round-trip fault: injecting it here would break nothing and pass."""
    if fault is None:
        return
    here = faults.roundtrip_names(server)
    if fault in here:
        return
    owner = next((s for s in servers() if fault in faults.roundtrip_names(s)), None)
    owned_by = faults.roundtrip_words(owner)[0] if owner else "no round trip"
    injector = faults.roundtrip_words(server)[1]
    raise InputError(f"--inject {fault} is a fault of {owned_by}; {injector} injects {', '.join(here)}")
