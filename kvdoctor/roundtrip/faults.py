"""The faults ``roundtrip --inject`` takes, per engine, as one enum that imports nothing heavy.

kvdoctor's model and ``--engine sglang`` reproduce SGLang's known silent failures
(:class:`kvdoctor.state.choices.FaultName`); ``--engine vllm`` wraps vLLM's offloading worker
(:data:`VLLM_FAULTS`, acted on in ``kvdoctor.engines.vllm.roundtrip``). Typer lists :class:`InjectName` in
``--help`` and refuses a typo while it parses; :func:`check_fault` refuses a fault of the other engine
(exit 2, one line) before anything is imported.
"""

from __future__ import annotations

from enum import Enum

from kvdoctor._exceptions import InputError
from kvdoctor.state.choices import FaultName

__all__ = ["SGLANG_FAULTS", "VLLM_FAULTS", "InjectName", "check_fault"]

SGLANG_FAULTS: tuple[str, ...] = tuple(f.value for f in FaultName)  # kvdoctor's model and --engine sglang
VLLM_FAULTS: tuple[str, ...] = ("drop-group", "reorder-blocks", "skip-scales")  # --engine vllm

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
