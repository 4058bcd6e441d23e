"""The list of injected faults as it travels to a server process, with one encoder and one decoder.

``--inject`` names one fault; a replay group arms several on one launch (``kvdoctor.consistency.run.run_cases``).
Inside the options and the server's environment (``KVDOCTOR_INJECT``, read by SGLang's site hook) the list is one
comma-joined string, so it is written by :func:`encode` and read back by :func:`decode` only. Stdlib only: the site
hook imports it inside the server.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["decode", "encode"]

SEPARATOR = ","


def encode(names: Iterable[str | None]) -> str | None:
    """NAMES as one string, each once, in order, empty ones left out (None: no fault)."""
    return SEPARATOR.join(dict.fromkeys(n for n in names if n)) or None


def decode(text: str | None) -> tuple[str, ...]:
    """The fault names in TEXT (``encode``'s string, or ``--inject``'s value), in order; () for none."""
    return tuple(n for n in (text or "").split(SEPARATOR) if n)
