"""Whether a wide table fits the console whole, measured rather than guessed from a column count.

Rich shrinks a table to the console by folding its cells, but a cell holding one long word (a pool
class, a refusal, a size held on one line) cannot fold below that word: the table then comes out
wider than the console, and the console crops its last column (``480.0 KiB/reques``, no right
border). A renderer asks :func:`fits_whole` first and, when the answer is no, lays the same rows out
as one block per row instead.
"""

from __future__ import annotations

import io

from rich.console import Console, RenderableType
from rich.table import Table

_UNBOUNDED = 10_000  # columns: wide enough that nothing wraps, so the measure is the natural width


def fits_whole(renderable: RenderableType, console: Console) -> bool:
    """True when RENDERABLE's natural width (every cell on one line) is within CONSOLE's width."""
    natural = Console(width=_UNBOUNDED, file=io.StringIO()).measure(renderable).maximum
    return natural <= console.width


def kv_table(title: str) -> Table:
    """The narrow layout: a headerless two-column table, a name then its facts, both folding.

    What a renderer falls back to when :func:`fits_whole` says no, and the shape of every key/value
    table (a model's facts, a pool's): the facts wrap at words across the whole width.
    """
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(overflow="fold", no_wrap=False)
    table.add_column(overflow="fold", no_wrap=False)
    return table
