"""``--device`` as the torch commands take it (``bench mxfp8``): an enum, so Typer lists the choices in --help and
refuses a typo before the command imports torch."""

from __future__ import annotations

from typing import Annotated

import typer

from kvdoctor.choices import DEVICE_HELP, Device

DeviceOption = Annotated[Device, typer.Option("--device", help=DEVICE_HELP)]
