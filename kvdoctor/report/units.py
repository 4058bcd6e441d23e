"""Values as a person writes them, for the commands' tables (one formatter, so every table agrees).

JSON keeps the raw values (``null``, ``false``, bytes as integers); only what a person reads goes
through here: ``–`` for nothing, ``yes``/``no`` for booleans, sizes with binary units.
"""

from __future__ import annotations

NONE = "–"  # an en dash: "no value", where Python would print None


def format_bytes(n: int | None) -> str:
    """``1,234 B``, ``3.3 MiB`` …; ``–`` when the size is unknown."""
    if n is None:
        return NONE
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value):,} B" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return str(n)


def yes_no(flag: bool | None) -> str:
    """``yes``, ``no``, or ``–`` when unknown."""
    return NONE if flag is None else ("yes" if flag else "no")


def human(value: object) -> str:
    """Any scalar as a person writes it: ``–``, ``yes``/``no``, ``1,024``, ``0.855``; lists joined by commas."""
    if value is None or value == "":
        return NONE
    if isinstance(value, bool):
        return yes_no(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e6 else f"{value:,.0f}"
    if isinstance(value, (list, tuple, set, frozenset)):
        return ", ".join(human(v) for v in value) or NONE
    return str(value)


def noun_for(count: object, singular: str, plural: str | None = None) -> str:
    """SINGULAR when COUNT is one, else PLURAL (SINGULAR + ``s`` by default): ``f"{n} {noun_for(n, 'retraction')}"``
    reads ``1 retraction`` and ``7 retractions``, never ``1 retractions``. A count that is not a number (``?``,
    ``–``: unknown) takes the plural, as a person writes "? retractions"."""
    return singular if count == 1 and not isinstance(count, bool) else (plural or f"{singular}s")
