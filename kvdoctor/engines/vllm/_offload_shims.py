"""The run-time patches that let vLLM 0.33's ``CPUOffloadingWorker`` run on a CPU-only machine, each named.

Every shim patches a vLLM (or torch) object for the duration of one round trip (:func:`applied`) and is undone
after; vLLM's files are never edited. None of them computes a result the round trip reads: the bytes are moved
by vLLM's own descriptor lists (``SingleDirectionOffloadingHandler.transfer_async`` and ``_fill_direct_ops``,
``v1/kv_offload/cpu/gpu_worker.py``); the memmove only executes the (src, dst, size) triples vLLM wrote. What
they do not check: stream ordering (the events are no-ops), pinned-memory DMA, the CUDA copy kernel itself.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kvdoctor._exceptions import EngineUnavailable
from kvdoctor.engines.vllm import _runtime as rt

__all__ = ["SHIMS", "Shim", "applied", "reports_cuda"]

GPU_WORKER = "vllm.v1.kv_offload.cpu.gpu_worker"


@dataclass(frozen=True)
class Shim:
    name: str
    why: str


SHIMS: tuple[Shim, ...] = (
    Shim(
        "tensor reports is_cuda",
        "SingleDirectionOffloadingHandler.__init__ asserts gpu_tensor.is_cuda (gpu_worker.py); the 'GPU' blocks are "
        "CPU tensors whose is_cuda property answers True",
    ),
    Shim(
        "memmove over vLLM's pointer lists",
        "ops.swap_blocks_batch is CUDA-only; each (src, dst, size) triple vLLM's handler wrote is executed by "
        "libc memmove, in vLLM's order",
    ),
    Shim(
        "no-op events",
        "torch.Event.record raises on the CPU backend; events always report done (stream ordering is not checked)",
    ),
    Shim(
        "no pinned memory",
        "gpu_worker.PIN_MEMORY is forced False: host tensors are pageable, so vLLM picks its non-Triton copy path",
    ),
)
NAMES = tuple(s.name for s in SHIMS)


def reports_cuda(tensor: Any) -> Any:
    """TENSOR as a view whose ``is_cuda`` is True (the first shim); its bytes are TENSOR's."""
    torch = rt.load("torch")

    class ReportsCuda(torch.Tensor):
        @property
        def is_cuda(self) -> bool:  # type: ignore[override]
            return True

    return tensor.as_subclass(ReportsCuda)


class _NoOpEvent:
    def __init__(self, enable_timing: bool = False, **_: Any) -> None:
        self.enable_timing = enable_timing

    def record(self, stream: Any = None) -> None:
        return None

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def elapsed_time(self, other: Any) -> float:
        return 0.0


@dataclass
class CopyCall:
    src: int
    dst: int
    size: int


class MemmoveBatch:
    """The memmove shim: executes vLLM's (src, dst, size) pointer triples and records each (the copy ledger)."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None)
        self._memmove = libc.memmove
        self._memmove.restype = ctypes.c_void_p
        self._memmove.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        self.calls: list[CopyCall] = []

    def __call__(self, src: Any, dst: Any, sizes: Any, **_: Any) -> None:
        for s, d, n in zip(src.tolist(), dst.tolist(), sizes.tolist(), strict=True):
            self._memmove(d, s, n)
            self.calls.append(CopyCall(s, d, n))


@contextlib.contextmanager
def applied(skip: frozenset[str] = frozenset()) -> Iterator[MemmoveBatch]:
    """Apply every shim but those named in SKIP (a test removes one to see the refusal); undone on exit."""
    unknown = skip - set(NAMES)
    if unknown:
        raise ValueError(f"unknown shims: {sorted(unknown)}")
    gw = rt.load(GPU_WORKER)
    torch = rt.load("torch")
    batch = MemmoveBatch()
    saved = {"swap": gw.ops.swap_blocks_batch, "event": torch.Event, "pin": gw.PIN_MEMORY}
    try:
        if "memmove over vLLM's pointer lists" not in skip:
            gw.ops.swap_blocks_batch = batch
        if "no-op events" not in skip:
            torch.Event = _NoOpEvent
        if "no pinned memory" not in skip:
            gw.PIN_MEMORY = False
        yield batch
    finally:
        gw.ops.swap_blocks_batch = saved["swap"]
        torch.Event = saved["event"]
        gw.PIN_MEMORY = saved["pin"]


def refusal(exc: BaseException, skipped: frozenset[str]) -> EngineUnavailable:
    """vLLM's worker failed on this machine: one exit-2 line naming the failure and the shims left out."""
    first = (str(exc).strip().splitlines() or [""])[0]
    left = f" (shims left out: {', '.join(sorted(skipped))})" if skipped else ""
    return EngineUnavailable(f"--engine vllm: vLLM's CPUOffloadingWorker failed: {type(exc).__name__}: {first}{left}")
