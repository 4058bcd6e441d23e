"""The space a sweep searches: a server's built-in one (its room's rows, ``kvdoctor.core.<s>.sweep``) or a user's
TOML file (:func:`kvdoctor.sweep.space.read_toml`), held to the server's own parser either way.

The server's room is found through its facts (``ServerFacts.sweep``, one line of the core floor's server table), so
nothing here names a server.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from kvdoctor._exceptions import InputError
from kvdoctor.core.servers import facts
from kvdoctor.sweep.space import Factor, Space, read_toml

__all__ = ["builtin", "launches", "load"]


def _room(server: str) -> ModuleType:
    module = facts(server).sweep
    if not module:
        raise InputError(f"--server {server} has no sweep space in kvdoctor")
    return importlib.import_module(module)


def builtin(server: str, topology: str | None = None) -> Space:
    """SERVER's built-in space (its parser's defaults, read from the generated table); exit 2 when it has none. A
    row shared over one topology only (``"pd"``) is shared in a space for that TOPOLOGY, the subject's elsewhere."""
    rows = _room(server).rows()
    if not rows:
        raise InputError(
            f"--server {server} has no built-in sweep space yet ({facts(server).sweep}): give your own with --space "
            "FILE (docs/sweep.md)"
        )
    factors = tuple(
        Factor(flag, tuple(v), d, why, topo, shared is True or shared == topology)  # type: ignore[arg-type]
        for flag, v, d, why, topo, shared in rows
    )
    return Space(server, factors)


def load(server: str, path: Path | None, topology: str) -> Space:
    """The space of a sweep of SERVER over TOPOLOGY: PATH's (its ``server`` must be SERVER) or the built-in one,
    checked against SERVER's parser (exit 2 naming the flag or value), with only the factors TOPOLOGY reads."""
    space = builtin(server, topology) if path is None else read_toml(path)
    if space.server != server:
        raise InputError(f"--space {path}: its flags are for {space.server!r}, and this sweep runs --server {server}")
    room = _room(server)
    space.check(room.grammar, room.known)
    kept = space.for_topology(topology)
    if not kept.factors:
        raise InputError(f"sweep space ({space.source}): no factor applies to --topology {topology}")
    return kept


def launches(
    server: str, topology: str, subject: tuple[str, ...], every: tuple[str, ...]
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The servers a configuration starts, (role, the server's flags), as SERVER's room names them."""
    return _room(server).launches(topology, subject, every)
