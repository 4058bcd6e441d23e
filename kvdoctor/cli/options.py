"""Options several commands share, declared once so their spelling, help and default cannot drift apart."""

from __future__ import annotations

from typing import Annotated

import typer

from kvdoctor.engines import GpuArch

GpuArchOption = Annotated[
    GpuArch,
    typer.Option(
        "--gpu-arch",
        help="The GPU the server runs on: SGLang's defaults (attention backend, page size, MXFP8) depend on it; "
        "with --engine sglang, the platform SGLang is told (a stub).",
    ),
]
