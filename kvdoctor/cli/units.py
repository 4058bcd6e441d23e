"""Human-readable sizes for the commands' tables (one formatter, so every table agrees)."""

from __future__ import annotations


def format_bytes(n: int | None) -> str:
    """``1,234 B``, ``3.3 MiB`` …; ``-`` when the size is unknown."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value):,} B" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return str(n)
