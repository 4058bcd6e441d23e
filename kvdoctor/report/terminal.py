"""Text from outside (model names, paths, server logs, config strings) made safe for a terminal.

Why: a model name, an ``--output-dir`` or a server's log tail may carry ANSI escape sequences or
other control characters; printed raw they recolour, clear or rewrite the user's terminal (and can
forge lines of a verdict). And rich reads ``[...]`` in text as markup. The character rules live in
``kvdoctor.text.printable`` (one home); here they are applied line by line, so multi-line text (a
launch plan, a log tail) keeps its lines, and ``markup`` also escapes rich markup for text printed
with markup on (table cells).
"""

from __future__ import annotations

from rich.markup import escape

from kvdoctor.text import printable


def plain(text: object) -> str:
    """TEXT without escape sequences or control characters; its line breaks are kept."""
    return "\n".join(printable(line) for line in str(text).replace("\r\n", "\n").split("\n"))


def markup(text: object, *, one_line: bool = False) -> str:
    """Outside TEXT as literal text for rich with markup on: escape sequences and control characters
    gone, then rich markup escaped. This is kvdoctor's one escape function (``kvdoctor.cli.text.safe``
    is it with ONE_LINE). ONE_LINE: line breaks become spaces too, so a value cannot split a table row
    or forge a verdict line; otherwise each line is kept (a launch plan, a log tail)."""
    return escape(printable(text) if one_line else plain(text))
