"""Faults switched on and off inside a running server, between bursts (``KVDOCTOR_ARM``).

A run that tests several faults on one deployment (``kvdoctor replay``: the control and every fault of a model and
scenario against one reference and one subject launch) installs all of them at start-up and arms one at a time:
kvdoctor writes the armed fault's name to the file ``KVDOCTOR_ARM`` names (:func:`arm`, atomically: a server never
reads half a name) before a burst and empties it after; a fault wrapper fires only while :func:`armed` says its name.
Without the variable a fault is always armed (one fault per launch, ``consistency --inject``). A fault that cannot be
switched at run time (its record's ``switchable`` is False: it changes an attribute, not a call) gets its own launch.

Read on every firing (a stat and a read of a few bytes): firings are per retraction, transfer or prefix hit, never
per token. Server-agnostic: SGLang's site hook and vLLM's plugin both call it. Imports nothing of either server.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ARM_ENV", "arm", "armed", "disarm"]

ARM_ENV = "KVDOCTOR_ARM"


def armed(name: str) -> bool:
    """Whether fault NAME may fire now: always without ``KVDOCTOR_ARM``; else while the file names it (a missing or
    unreadable file arms nothing)."""
    path = os.environ.get(ARM_ENV)
    if not path:
        return True
    try:
        return name in Path(path).read_text(encoding="utf-8").split()
    except OSError:
        return False


def arm(path: Path, *names: str) -> None:
    """Arm NAMES (none: disarm every fault) for the servers reading PATH; written whole, then renamed into place."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(" ".join(names) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def disarm(path: Path) -> None:
    arm(path)
