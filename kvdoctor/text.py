"""Strings from the outside world (configs, paths, argv) made safe to print on one terminal line.

A config field or a file name can hold anything: newlines that would split kvdoctor's one-line error,
ANSI escape sequences that recolour or rewrite the terminal, bidirectional overrides that reorder
what a reader sees. ``printable`` removes them; ``plain`` applies the same rules line by line (a launch plan or a
log tail keeps its lines); ``markup`` and its one-line form ``safe`` also escape rich markup (``[/x]`` in a model
name would crash rich, ``[mamba2_config; srt/...]`` would vanish as an unknown tag), so every renderer passes outside
text through them. This is the one module of terminal-safe text. Pure standard library (rich's escape is imported
inside ``markup``), so the core floor can use it too.
"""

from __future__ import annotations

import re

# CSI (ESC [ ... final), OSC (ESC ] ... BEL or ESC \) and two-byte ESC sequences.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]")
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_WHITESPACE = frozenset("\t\n\r\v\f\x85\u2028\u2029")
MAX_SHOWN = 200  # characters of one outside value echoed in a message


def printable(text: object) -> str:
    """TEXT without escape sequences or control characters; line breaks and tabs become spaces."""
    value = str(text)
    if value.isascii() and value.isprintable():  # no escape, control character or line break: nothing to drop
        return value
    import unicodedata  # a shared library: loaded only for text that needs it

    out = []
    for ch in _ANSI.sub("", value):
        if ch in _WHITESPACE:
            out.append(" ")
        elif ch in _BIDI or unicodedata.category(ch) in ("Cc", "Cs"):
            continue
        else:
            out.append(ch)
    return "".join(out)


def shown(text: object, limit: int = MAX_SHOWN) -> str:
    """A printable TEXT cut to LIMIT characters (a 10,000-character path stays one readable line)."""
    clean = printable(text)
    return clean if len(clean) <= limit else f"{clean[: limit - 1]}…"


def plain(text: object) -> str:
    """TEXT without escape sequences or control characters; its line breaks are kept."""
    return "\n".join(printable(line) for line in str(text).replace("\r\n", "\n").split("\n"))


def markup(text: object, *, one_line: bool = False) -> str:
    """Outside TEXT as literal text for rich with markup on: escape sequences and control characters
    gone, then rich markup escaped. This is kvdoctor's one escape function (``safe`` is it with ONE_LINE).
    ONE_LINE: line breaks become spaces too, so a value cannot split a table row or forge a verdict line;
    otherwise each line is kept (a launch plan, a log tail)."""
    from rich.markup import escape

    return escape(printable(text) if one_line else plain(text))


def safe(value: object) -> str:
    """VALUE as literal text for rich: no escape sequences, control characters or line breaks, markup escaped."""
    return markup(value, one_line=True)
