"""Whether a wide table fits the console whole, measured rather than guessed from a column count; the layouts every
renderer shares (the key/value table, the hazards block).

Rich shrinks a table to the console by folding its cells, but a cell holding one long word (a pool
class, a refusal, a size held on one line) cannot fold below that word: the table then comes out
wider than the console, and the console crops its last column (``480.0 KiB/reques``, no right
border). A renderer asks :func:`fits_whole` first and, when the answer is no, lays the same rows out
as one block per row instead.

Rich is imported when a table is drawn, not with this module: a server's renderer (``kvdoctor.cli.render``) stands on
it, and ``inspect --json`` draws nothing.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvdoctor.report.units import NONE
from kvdoctor.text import safe

if TYPE_CHECKING:
    from rich.console import Console, Group, RenderableType
    from rich.table import Table

    from kvdoctor.core.registry import Hazard

_UNBOUNDED = 10_000  # columns: wide enough that nothing wraps, so the measure is the natural width
SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
WIDE = 120  # below this many columns, rows whose cells would break mid-word are laid out vertically


def fits_whole(renderable: RenderableType, console: Console) -> bool:
    """True when RENDERABLE's natural width (every cell on one line) is within CONSOLE's width."""
    from rich.console import Console

    natural = Console(width=_UNBOUNDED, file=io.StringIO()).measure(renderable).maximum
    return natural <= console.width


def kv_table(title: str) -> Table:
    """The narrow layout: a headerless two-column table, a name then its facts, both folding.

    What a renderer falls back to when :func:`fits_whole` says no, and the shape of every key/value
    table (a model's facts, a pool's): the facts wrap at words across the whole width.
    """
    from rich.table import Table

    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(overflow="fold", no_wrap=False)
    table.add_column(overflow="fold", no_wrap=False)
    return table


def hazards_block(hazards: Sequence[Hazard], width: int, *, title: str = "Hazards") -> Table | Group:
    """The hazards with their full advice: a table when wide, else one block per hazard (the advice
    wrapped at words over the whole width, so no flag name is broken in two)."""
    from rich.console import Group
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    if width >= WIDE:
        t = Table(title=title, title_justify="left")
        for col in ("severity", "code", "what to do"):
            t.add_column(col, overflow="fold")  # wrap, even inside a long word: never cut with …
        for h in hazards:
            style = SEVERITY_STYLE.get(h.severity, "")
            t.add_row(f"[{style}]{safe(h.severity)}[/]", safe(h.code), safe(h.message))
        if not hazards:
            t.add_row(NONE, NONE, "none")
        return t
    parts: list[Text | Padding] = [Text(title, style="italic")]
    for h in hazards:
        head = Text()
        head.append(h.severity, style=SEVERITY_STYLE.get(h.severity, ""))
        head.append(f"  {h.code}")
        parts += [head, Padding(Text(h.message, overflow="fold"), (0, 0, 0, 2))]
    if not hazards:
        parts.append(Text("none"))
    return Group(*parts)
