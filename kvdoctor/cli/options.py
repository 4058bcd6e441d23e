"""Options several commands share, declared once so their spelling, help and default cannot drift apart."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from kvdoctor.engines import GpuArch

if TYPE_CHECKING:
    from kvdoctor.choices import Device

GpuArchOption = Annotated[
    GpuArch,
    typer.Option(
        "--gpu-arch",
        help="The GPU the server runs on: SGLang's defaults (attention backend, page size, MXFP8) depend on it; "
        "with --engine sglang, the platform SGLang is told (a stub).",
    ),
]


def _device_option() -> Any:
    # An enum, so Typer lists the choices in --help and refuses a typo before the command imports torch.
    from kvdoctor.choices import Device

    return Annotated[
        Device,
        typer.Option(
            "--device", help="Where the work runs: auto (CUDA when torch sees one, else the CPU), cpu or cuda."
        ),
    ]


def __getattr__(name: str) -> Any:
    """``DeviceOption``, made when a torch command first imports it: ``inspect`` does not load the torch
    commands' enums (``kvdoctor.choices``)."""
    if name == "DeviceOption":
        option = globals()["DeviceOption"] = _device_option()
        return option
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    DeviceOption = Annotated[Device, typer.Option("--device")]
