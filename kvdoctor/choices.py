"""The fixed choices of the torch commands' options, as enums that import nothing heavy.

Why here and not next to the code that acts on them: Typer validates an enum option (and lists
its values in ``--help``) while it parses the command line, before the command body runs. If the
names lived only in the modules that act on them (which import torch), a typo in ``--device`` or
``--scale-mode`` would cost a torch import before it is refused. :class:`ScaleMode` is the codec's
own list (``kvdoctor.mxfp8`` checks a ``scale_mode`` against it). The ``--inject`` names are the
fault registry's (``kvdoctor.core.faults.FaultName``), torch-free too.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["Device", "MxfpBackend", "ScaleMode", "TorchDtype"]


DEVICE_HELP = "Where the work runs: auto (CUDA when torch sees one, else the CPU), cpu or cuda."  # --device's


class Device(str, Enum):
    """Where the pools (or the benchmark's tensors) live."""

    AUTO = "auto"  # CUDA when torch sees one, else the CPU
    CPU = "cpu"
    CUDA = "cuda"


class MxfpBackend(str, Enum):
    """Which MXFP8 codec implementations ``bench mxfp8`` times."""

    ALL = "all"
    TORCH = "torch"
    TRITON = "triton"

    def names(self) -> tuple[str, ...]:
        """The codec backends this choice stands for (``all`` is both)."""
        return ("torch", "triton") if self is MxfpBackend.ALL else (self.value,)


class ScaleMode(str, Enum):
    """How an MXFP8 block's E8M0 scale is rounded: the one list of the codec's modes (``kvdoctor.mxfp8``)."""

    SGLANG = "sglang"
    RCEIL = "rceil"
    FLOOR = "floor"


class TorchDtype(str, Enum):
    """The input dtypes ``bench mxfp8`` quantizes (names of ``torch`` attributes)."""

    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"
    FLOAT32 = "float32"
