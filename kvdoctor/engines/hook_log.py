"""The one line format kvdoctor's in-server code (SGLang's site hook, vLLM's plugin) reports through, and the
environment variables that code is controlled by.

Each event is one line, ``PID EVENT DETAIL``, appended in one write to the file an environment variable names
(kvdoctor reads it back after the run: which fault installed, how often it fired). No variable, no file; a file
that cannot be written never disturbs the server. Imports nothing of either server.

:func:`append` is the one writer and :func:`read` / :func:`parse` the one reader: every reader of these logs (the
run's fault, stand-in and site-hook counts, the unrequested-fault gate, the state trace's ``digest-failed``) reads
:class:`Event` records through :class:`EventLog`, so the format is split in one place.

``CONTROL_ENV`` names every variable kvdoctor's in-server code reads. kvdoctor owns them: the supervisor gives a
server only the ones the run itself sets (``kvdoctor.deploy.supervisor``), so a ``KVDOCTOR_INJECT`` exported in the
user's shell cannot install a fault nobody asked for; and a fault event in a log of a run without ``--inject``
(:func:`faults`) makes the verdict unknown, never a finding against the server.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CASE", "CONTROL_ENV", "Event", "EventLog", "append", "faults", "mark", "parse", "read"]

CONTROL_ENV = frozenset(
    {
        "KVDOCTOR_INJECT",  # SGLang site hook (engines/sglang/server_hooks.py): the faults to install (comma-separated)
        "KVDOCTOR_ARM",  # both servers' faults (engines/arming.py): the file naming the fault armed now
        "KVDOCTOR_FAULT_FILE",  # both servers (engines/fault_file.py): ROLE:PATH of the user's --fault-file
        "KVDOCTOR_PATCHES",  # SGLang site hook: the CPU enablers to apply
        "KVDOCTOR_DIGEST_LOG",  # SGLang site hook: where the state trace goes
        "KVDOCTOR_STATE_BYTES",  # SGLang site hook: keep the recurrent state's bytes up to this size per request
        "KVDOCTOR_HOOK_LOG",  # SGLang site hook: this format
        "KVDOCTOR_STANDIN_LOG",  # the CPU stand-in of sgl_kernel (engines/sglang/cpu_shims)
        "KVDOCTOR_VLLM_INJECT",  # vLLM plugin (engines/vllm/server_plugin.py): the fault to install
        "KVDOCTOR_VLLM_PLUGIN_LOG",  # vLLM plugin: this format
    }
)
FAULT_EVENT = "fault-"  # every event of an installed, firing, refused or failed fault starts so
VLLM_LOADED = "loaded"  # the vLLM plugin's first line in each process: ``loaded FAULT`` or ``loaded -``
CASE = "case"  # kvdoctor's own line before a measured burst: ``case BURST`` (what follows is that burst's)


def append(env_var: str, event: str, detail: str = "") -> None:
    """Append ``PID EVENT DETAIL`` to the file ENV_VAR names (nothing when unset or unwritable)."""
    path = os.environ.get(env_var)
    if path:
        _write(path, event, detail)


def mark(path: Path, burst: str) -> None:
    """kvdoctor's own ``case BURST`` line, written just before the measured burst BURST is sent: the events after it
    (up to the next one) are that burst's (:meth:`EventLog.bursts`)."""
    _write(str(path), CASE, burst)


def _write(path: str, event: str, detail: str) -> None:
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()} {event} {detail}".rstrip() + "\n")
    except OSError:
        pass


@dataclass(frozen=True)
class Event:
    """One line of the log: the writing process, the event's name and its detail (the rest of the line, spaces
    kept; empty when the line has none)."""

    pid: str
    name: str
    detail: str = ""

    @property
    def text(self) -> str:
        """``EVENT DETAIL`` as the line wrote it, the pid left out (how a finding quotes the event)."""
        return f"{self.name} {self.detail}".strip()


def _event(line: str) -> Event:
    pid, _, rest = line.partition(" ")
    name, _, detail = rest.partition(" ")
    return Event(pid, name, detail)


@dataclass(frozen=True)
class EventLog:
    """The events of one log, in the order they were written."""

    events: tuple[Event, ...] = ()

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def names(self) -> list[str]:
        return [e.name for e in self.events]

    def count(self, *names: str) -> int:
        """How many events are any of NAMES."""
        return sum(e.name in names for e in self.events)

    def details(self, *names: str) -> list[str]:
        """The detail of every event that is one of NAMES, in order."""
        return [e.detail for e in self.events if e.name in names]

    def first(self, *names: str) -> str | None:
        """The detail of the first event that is one of NAMES (None: no such event)."""
        return next((e.detail for e in self.events if e.name in names), None)

    def bursts(self, *names: str, startup: bool = True) -> EventLog:
        """The events of the bursts NAMES: those before any ``case`` line (start-up: hooks armed, faults refused at
        import; not with STARTUP False) and those after a ``case NAME`` line up to the next ``case`` line. A log
        with no ``case`` line is all start-up."""
        out: list[Event] = []
        current: str | None = None
        for e in self.events:
            if e.name == CASE:
                current = e.detail
            elif (current is None and startup) or (current is not None and current in names):
                out.append(e)
        return EventLog(tuple(out))

    def of_fault(self, name: str) -> EventLog:
        """This log without the fault events of any fault but NAME (each fault's events name it first, a refusal as
        ``NAME:``): one case's view of a launch that installed several faults."""
        kept = (e for e in self.events if not _is_fault(e) or e.detail.split(" ", 1)[0].rstrip(":") == name)
        return EventLog(tuple(kept))

    def faults(self) -> list[str]:
        """Every event that says a fault was asked for, armed, installed or fired inside a server (``EVENT
        DETAIL``, the pid left out), in order."""
        return [e.text for e in self.events if _is_fault(e)]


def _is_fault(e: Event) -> bool:
    asked = e.name == VLLM_LOADED and e.detail.strip() not in ("", "-")
    return e.name.startswith(FAULT_EVENT) or asked


def parse(lines: Iterable[str]) -> EventLog:
    """LINES of a log in this format as events (blank lines skipped)."""
    return EventLog(tuple(_event(line) for line in lines if line.strip()))


def read(path: Path) -> EventLog:
    """The log at PATH (no file: no events; the server may never have written one)."""
    return parse(path.read_text(encoding="utf-8").splitlines()) if path.exists() else EventLog()


def faults(lines: Iterable[str]) -> list[str]:
    """Every line of LINES (a log in this format) that says a fault was asked for, armed, installed or fired
    inside a server (``EVENT DETAIL``, the pid left out), in order."""
    return parse(lines).faults()
