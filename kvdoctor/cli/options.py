"""Options several commands share, declared once so their spelling, help and default cannot drift apart."""

from __future__ import annotations

from typing import Annotated

import typer

from kvdoctor.engines import GpuArch
from kvdoctor.state.choices import Device

GpuArchOption = Annotated[
    GpuArch,
    typer.Option(
        "--gpu-arch",
        help="The GPU the server runs on: SGLang's defaults (attention backend, page size, MXFP8) depend on it; "
        "with --engine sglang, the platform SGLang is told (a stub).",
    ),
]

# An enum, so Typer lists the choices in --help and refuses a typo before the command imports torch.
DeviceOption = Annotated[
    Device,
    typer.Option("--device", help="Where the work runs: auto (CUDA when torch sees one, else the CPU), cpu or cuda."),
]
