"""Options several commands share, declared once so their spelling, help and default cannot drift apart."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from kvdoctor.choices import DEVICE_HELP, Device
from kvdoctor.engines import GPU_ARCH_HELP, GpuArch

if TYPE_CHECKING:
    from kvdoctor.choices import Device

GpuArchOption = Annotated[
    GpuArch,
    typer.Option("--gpu-arch", help=GPU_ARCH_HELP),
]


def _device_option() -> Any:
    # An enum, so Typer lists the choices in --help and refuses a typo before the command imports torch.
    return Annotated[Device, typer.Option("--device", help=DEVICE_HELP)]


def __getattr__(name: str) -> Any:
    """``DeviceOption``, made when a torch command first imports it: ``inspect`` does not load the torch
    commands' enums (``kvdoctor.choices``)."""
    if name == "DeviceOption":
        option = globals()["DeviceOption"] = _device_option()
        return option
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    DeviceOption = Annotated[Device, typer.Option("--device")]
