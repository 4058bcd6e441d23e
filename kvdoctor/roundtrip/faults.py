"""The faults ``roundtrip --inject`` takes, per engine, as one enum that imports nothing heavy.

kvdoctor's model and ``--engine sglang`` reproduce SGLang's known silent failures
(:data:`SGLANG_FAULTS`); ``--engine vllm`` wraps vLLM's offloading worker (:data:`VLLM_FAULTS`, acted on in
``kvdoctor.engines.vllm.roundtrip``). Both lists are read from the fault registry (``kvdoctor.core.faults``).
Typer lists :class:`InjectName` in ``--help`` and refuses a typo while it parses; :func:`check_fault` refuses a
fault of the other engine (exit 2, one line) before anything is imported.
"""

from __future__ import annotations

from enum import Enum

from kvdoctor._exceptions import InputError
from kvdoctor.core import faults
from kvdoctor.core.faults import Target
from kvdoctor.core.servers import Server

__all__ = ["SGLANG_FAULTS", "VLLM_FAULTS", "InjectName", "check_fault"]

SGLANG_FAULTS: tuple[str, ...] = faults.names(
    server=Server.SGLANG, target=Target.MODEL
)  # the model and --engine sglang
VLLM_FAULTS: tuple[str, ...] = faults.names(server=Server.VLLM, target=Target.ENGINE)  # --engine vllm

InjectName = Enum(  # type: ignore[misc]  # the functional API: one member per fault, value = its spelling
    "InjectName", [(name.upper().replace("-", "_"), name) for name in (*SGLANG_FAULTS, *VLLM_FAULTS)], type=str
)


def check_fault(fault: str | None, *, vllm: bool) -> None:
    """Exit 2 when FAULT belongs to the other engine: injecting it here would break nothing and pass."""
    if fault is None:
        return
    if vllm and fault not in VLLM_FAULTS:
        raise InputError(
            f"--inject {fault} is a fault of SGLang's pools; --engine vllm injects {', '.join(VLLM_FAULTS)}"
        )
    if not vllm and fault not in SGLANG_FAULTS:
        raise InputError(
            f"--inject {fault} is a fault of vLLM's offloading worker (--server vllm --engine vllm); "
            f"this engine injects {', '.join(SGLANG_FAULTS)}"
        )
