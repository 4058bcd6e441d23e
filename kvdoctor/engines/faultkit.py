"""The API of a fault file (``kvdoctor consistency --fault-file PATH``): your own fault, inside the servers kvdoctor
launches. Reference and a worked example: ``docs/fault-file.md``.

A fault file is a short Python file that wraps one or more server functions or methods, each in a role::

    from kvdoctor.engines import faultkit

    @faultkit.wrap("sglang.srt.managers.scheduler:Scheduler.run_batch", role="single")
    def my_fault(original, scheduler, batch, *args, **kwargs):
        ...  # change what the server is about to do
        return original(scheduler, batch, *args, **kwargs)

- :func:`wrap` ``(target, role=...)``: TARGET is ``"module:Attr.path"`` (the module's dotted name, a colon, the
  attribute's dotted path in it: a function, a class's method, a static or class method). ROLE is where it runs:
  ``prefill`` or ``decode`` (``--topology pd``: the prefill server, the pressured deployment's decode), ``single``
  (``--topology single``: the pressured server), ``any`` (every server the fault goes to in that topology). Your
  function is called instead of the target with ``original`` (the target as it was) and the call's own arguments
  (a method's ``self`` first); what it returns is what the caller gets.
- Each call of your function is one *firing*, logged inside the server (``fault-fired``) and counted by the run's
  ``fault-fired`` gate: a fault file that never fired (its target never called, a wrong path, a module that role
  never imports) turns the run red, never a pass. A call that changed nothing says so with :func:`unchanged`
  (it is then no firing); :func:`note` adds a detail to this call's log line.
- The fault fires only while kvdoctor arms it: during the pressured burst (``kvdoctor.engines.arming``; its name is
  the file's name without ``.py``). Otherwise the original runs, untouched.

Import the server's own modules inside your function, not at the top of the file: kvdoctor reads the file before
anything starts (to refuse a bad one, exit 2) in a child interpreter of its own (never kvdoctor's process: what the
file's top does, prints or exits, cannot touch the run), which may have no server installed, and gives it a minute.
This module imports nothing of either server.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["ROLES", "Declared", "FaultFileError", "Wrap", "note", "unchanged", "wrap"]

ROLES = ("prefill", "decode", "single", "any")
F = TypeVar("F", bound=Callable[..., Any])


class FaultFileError(ValueError):
    """A fault file kvdoctor cannot use (raised while it is read; one line, shown as is)."""


@dataclass(frozen=True)
class Declared:
    """One wrap a fault file declares, as kvdoctor keeps it: TARGET (``module:Attr.path``) and ROLE (no function)."""

    target: str
    role: str

    @property
    def module(self) -> str:
        return self.target.partition(":")[0]

    @property
    def attribute(self) -> str:
        return self.target.partition(":")[2]


@dataclass(frozen=True)
class Wrap(Declared):
    """One wrap a fault file declares, with the user's FAULT function (what a process that ran the file holds)."""

    fault: Callable[..., Any]


# The wraps being collected, per thread: set while a fault file is run to read its wraps (kvdoctor.engines.fault_file:
# in kvdoctor's reading child, or a server's start-up). Per thread, so two reads never meet.
_reading = threading.local()


def check_target(target: object) -> str:
    """TARGET as ``module:Attr.path`` with every part a Python identifier; else :class:`FaultFileError`."""
    if not isinstance(target, str):
        raise FaultFileError(f"a wrap's target must be a string 'module:Attr.path', got {type(target).__name__}")
    module, colon, attribute = target.partition(":")
    parts = [*module.split("."), *attribute.split(".")]
    if not colon or not all(p.isidentifier() for p in parts):
        raise FaultFileError(
            f"malformed target {target!r}: expected 'module:Attr.path', e.g. "
            "'sglang.srt.managers.scheduler:Scheduler.run_batch'"
        )
    return target


def check_role(role: object) -> str:
    if role not in ROLES:
        raise FaultFileError(f"unknown role {role!r}: choose one of {', '.join(ROLES)}")
    return str(role)


def wrap(target: str, *, role: str) -> Callable[[F], F]:
    """Declare FUNCTION (the decorated one) as the fault on TARGET in ROLE; the function itself is returned
    unchanged (kvdoctor installs it inside the server)."""
    check_target(target)
    check_role(role)

    def declare(function: F) -> F:
        if not callable(function):
            raise FaultFileError(f"wrap({target!r}) must decorate a function, got {type(function).__name__}")
        found: list[Wrap] | None = getattr(_reading, "found", None)
        if found is not None:
            found.append(Wrap(target, role, function))
        return function

    return declare


@contextmanager
def collect() -> Iterator[list[Wrap]]:
    """Every :func:`wrap` made on this thread while the block runs (one fault file being read), in order. Reads on
    other threads collect their own; one inside another on the same thread is a RuntimeError."""
    if getattr(_reading, "found", None) is not None:
        raise RuntimeError("a fault file is already being read on this thread")
    found: list[Wrap] = []
    _reading.found = found
    try:
        yield found
    finally:
        _reading.found = None


class Firing:
    """One call of a fault function while it runs: whether it changed nothing (and why), and its notes."""

    def __init__(self) -> None:
        self.unchanged: str | None = None
        self.notes: list[str] = []


_local = threading.local()


def current() -> Firing:
    """The firing of the fault function running on this thread (RuntimeError outside one)."""
    stack: list[Firing] = getattr(_local, "stack", [])
    if not stack:
        raise RuntimeError("faultkit.unchanged() and faultkit.note() work only inside a wrapped fault function")
    return stack[-1]


def enter() -> Firing:
    firing = Firing()
    _local.stack = [*getattr(_local, "stack", []), firing]
    return firing


def leave() -> None:
    _local.stack = getattr(_local, "stack", [])[:-1]


def unchanged(reason: str) -> None:
    """This call changed nothing (REASON says why): it is not counted as a firing."""
    current().unchanged = " ".join(str(reason).split()) or "unchanged"


def note(detail: str) -> None:
    """Add DETAIL (one line) to this firing's ``fault-fired`` log line."""
    current().notes.append(" ".join(str(detail).split()))
