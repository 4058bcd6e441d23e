"""The one registry of kvdoctor's faults: every ``--inject`` name, what it breaks, where and how, one record each.

A fault is a deliberate, known silent failure kvdoctor does to a request's KV-cache state to prove a check can see
it (the check must turn red and name the right component). Three commands inject faults, each in its own place:

- ``kvdoctor roundtrip`` (:attr:`Target.MODEL`): kvdoctor's own model of SGLang's pools (``kvdoctor.state``);
- ``kvdoctor roundtrip --engine <server>`` (:attr:`Target.ENGINE`): the server's own pool objects, built and driven
  by kvdoctor in-process (``kvdoctor.engines.<server>``);
- ``kvdoctor consistency --inject`` (:attr:`Target.SERVER`): inside a real server process kvdoctor launched.

This module holds the *records* (:class:`Fault`): name, server, target, the state path it acts on, the server role
it runs in, the server code it hooks (citations in the form of the rules' citations, checked against the installed
server by the engine suites), what it does in one line, which models can show it, the public bugs it replays. Each
server's records live in its room (``core/<server>/faults.py``, torch-free), named by one line of :data:`_ROOMS`; the
*implementations* (the strategy that does the damage) stay beside the code they act on: a live fault's is named by
its record's ``impl``, and the tests hold each round-trip implementation set equal to :func:`names` of its target.
One name means one thing: a name shared by two records is the same fault done in two places (same server, path
and needs).

Read at CLI start-up (``--help`` lists the choices), so it imports nothing heavy: the rooms are a few tuples.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from enum import Enum
from functools import cache

from kvdoctor.core.cite import Cite
from kvdoctor.core.paths import ActsOn, StatePath
from kvdoctor.core.record import record
from kvdoctor.core.servers import Server

__all__ = [
    "ActsOn",
    "Fault",
    "FaultName",
    "Needs",
    "Role",
    "StatePath",
    "Target",
    "faults",
    "get",
    "names",
    "register",
    "renamed",
    "roundtrip_names",
    "roundtrip_words",
    "select",
]


class Target(str, Enum):
    """Which command runs a fault, and on whose objects."""

    MODEL = "model-roundtrip"  # kvdoctor roundtrip: kvdoctor's own model of the server's pools
    ENGINE = "engine-roundtrip"  # kvdoctor roundtrip --engine <server>: the server's pool objects, in-process
    SERVER = "consistency"  # kvdoctor consistency --inject: inside a real server process

    def command(self, server: str) -> str:
        """The command line (its fixed part) that injects a fault of this target on SERVER."""
        return {
            Target.MODEL: "kvdoctor roundtrip",
            Target.ENGINE: f"kvdoctor roundtrip --engine {server}",
            Target.SERVER: f"kvdoctor consistency --server {server}",
        }[self]


class Role(str, Enum):
    """The server process a fault runs in."""

    PREFILL = "prefill"
    DECODE = "decode"  # PD decode (SGLang retracts there)
    SINGLE = "single"  # one server doing both
    ANY = "any"  # wherever the path runs (kvdoctor's in-process round trips)


class Needs(str, Enum):
    """The state component a model must have for a fault to change anything (else it is refused, exit 2)."""

    ANY = "any"  # every model (a reserved slot, a KV-cache group)
    KV = "kv"  # an attention KV pool or group
    RECURRENT = "recurrent"  # recurrent (conv/temporal, Mamba) state
    SWA = "swa"  # a sliding-window KV sub-pool
    BLOCK_SCALES = "block-scales"  # MXFP8 block-scale planes (--kv-cache-dtype mxfp8)
    IN_PAGE_SCALES = "in-page-scales"  # scales inside the KV page (vLLM's *_per_token_head KV dtypes)

    @property
    def models(self) -> str:
        """Which models can show a fault with this need, as a table cell says it."""
        return {
            Needs.ANY: "any model",
            Needs.KV: "attention models",
            Needs.RECURRENT: "recurrent-state models (Mamba, linear attention)",
            Needs.SWA: "sliding-window models",
            Needs.BLOCK_SCALES: "MXFP8 KV caches (block scales)",
            Needs.IN_PAGE_SCALES: "per-token-head quantized KV caches (in-page scales)",
        }[self]


@record(frozen=True)
class Fault:
    """One fault, done in one place. ``hooks``: the server code it acts on (or, for :attr:`Target.MODEL`, the
    server code kvdoctor's model restates), first the one it wraps; ``replays``: the public bugs it reproduces (ids
    of ``kvdoctor.core.bugs``); ``formerly``: old spellings of its name the server's ``--inject`` still accepts
    (never another fault's name on the same server); ``switchable``: whether it can be armed and disarmed inside a
    running server between bursts (``kvdoctor.engines.arming``), so one launch serves many cases; a fault that is
    not gets its own launch."""

    name: str
    server: str  # a Server value: the server whose state path it breaks
    target: Target
    path: StatePath
    role: Role
    hooks: tuple[Cite, ...]
    does: str  # what it does, one line
    needs: Needs
    replays: tuple[str, ...] = ()
    formerly: tuple[str, ...] = ()
    switchable: bool = False
    # Target.SERVER only: the code that does it ("module:function", the function taking the fault's name and
    # returning {server module: hook}), and how the fault-fired gate words what it acted on (None: its path's words).
    impl: str = ""
    acts_on: ActsOn | None = None

    @property
    def command(self) -> str:
        return self.target.command(self.server)


# One line per server: the room holding its records (kvdoctor's own model's faults sit with SGLang's: they model it).
_ROOMS: dict[str, str] = {
    Server.SGLANG.value: "kvdoctor.core.sglang.faults:FAULTS",
    Server.VLLM.value: "kvdoctor.core.vllm.faults:FAULTS",
}
_REGISTERED: dict[str, tuple[Fault, ...]] = {}


def register(server: str, records: Iterable[Fault]) -> None:
    """Add a server's records at run time (a test's fake server, through this table alone)."""
    _REGISTERED[server] = tuple(records)
    faults.cache_clear()


def _room(path: str) -> tuple[Fault, ...]:
    module, _, name = path.partition(":")
    return tuple(getattr(importlib.import_module(module), name))


def roundtrip_names(server: Server | str) -> tuple[str, ...]:
    """The faults ``roundtrip --server SERVER --inject`` takes: its model's and its engine's, in registry order."""
    found = (*select(server=server, target=Target.MODEL), *select(server=server, target=Target.ENGINE))
    return tuple(dict.fromkeys(f.name for f in found))


def roundtrip_words(server: Server | str) -> tuple[str, str]:
    """How a refusal names SERVER's round-trip faults (their owner) and who injects them (its room's words)."""
    path = _ROOMS.get(str(_value(server)))
    room = importlib.import_module(path.partition(":")[0]) if path else None
    name = str(_value(server))
    return getattr(room, "ROUNDTRIP_OWNER", f"{name}'s pools"), getattr(room, "ROUNDTRIP_INJECTOR", f"--engine {name}")


@cache
def faults() -> tuple[Fault, ...]:
    """Every record, servers in the table's order (registered ones last), each room in its own order."""
    rooms = [_room(path) for server, path in _ROOMS.items() if server not in _REGISTERED]
    return tuple(f for room in (*rooms, *_REGISTERED.values()) for f in room)


def _value(choice: Enum | str | None) -> str | None:
    return None if choice is None else str(getattr(choice, "value", choice))


def select(
    *, server: Server | str | None = None, target: Target | str | None = None, path: StatePath | str | None = None
) -> tuple[Fault, ...]:
    """The records matching every filter given (None: any)."""
    want = (_value(server), _value(target), _value(path))
    return tuple(
        f
        for f in faults()
        if all(w is None or w == have for w, have in zip(want, (f.server, f.target.value, f.path.value), strict=True))
    )


def names(
    *, server: Server | str | None = None, target: Target | str | None = None, path: StatePath | str | None = None
) -> tuple[str, ...]:
    """The distinct fault names matching the filters, in registry order."""
    return tuple(dict.fromkeys(f.name for f in select(server=server, target=target, path=path)))


def get(name: str, *, server: Server | str | None = None, target: Target | str | None = None) -> Fault:
    """The one record NAME (or an old spelling of it, ``formerly``) has on SERVER, for TARGET; KeyError names the
    choices when there is none or several (``drop-kv`` alone is SGLang's fault and vLLM's old spelling: ambiguous)."""
    found = [f for f in select(server=server, target=target) if name == f.name or name in f.formerly]
    if len(found) != 1:
        where = " ".join(v for v in (_value(server), _value(target)) if v) or "any target"
        what = "no fault" if not found else f"{len(found)} faults"
        choices = ", ".join(names(server=server, target=target))
        raise KeyError(f"{what} {name!r} for {where} (choose one of {choices})")
    return found[0]


def renamed(*, server: Server | str | None = None, target: Target | str | None = None) -> dict[str, str]:
    """Old spelling -> the name it stands for now, for the records matching the filters."""
    return {old: f.name for f in select(server=server, target=target) for old in f.formerly}


# The faults ``kvdoctor roundtrip --inject`` takes on kvdoctor's own model (and, by the same names, SGLang's pools):
# Typer lists and validates an enum while it parses, so a typo is refused before torch is imported.
FaultName = Enum(  # type: ignore[misc]  # the functional API: one member per fault, value = its spelling
    "FaultName", [(n.upper().replace("-", "_"), n) for n in names(target=Target.MODEL)], type=str
)
FaultName.__doc__ = "The faults ``--inject`` reproduces in kvdoctor's own model (:func:`names` of Target.MODEL)."
