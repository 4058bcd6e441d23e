"""One progress display for long commands: a spinner, the step RUNNING now, M of N done, time elapsed.

Built from rich's own columns. While a step's count is unknown (torch, triton or SGLang still
importing, a launch line being resolved) only the spinner, the step and the clock show: rich's
bar and ``MofNCompleteColumn`` would draw an idle bar and ``0/?`` there, which says nothing.
The display is transient and on stderr, so stdout (a table, a JSON object) is never mixed with it,
and it is drawn only on a terminal: piped or in a CI log, the command's output is all there is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.progress import ProgressColumn, Task

T = TypeVar("T")
Update = Callable[[str, int, int], None]  # (what is running now, steps finished, steps in all; 0: unknown)


def _when_counted(column: ProgressColumn) -> ProgressColumn:
    """COLUMN, drawn only once the task's total is known (nothing while it is not)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class WhenCounted(ProgressColumn):
        def render(self, task: Task) -> RenderableType:
            return column.render(task) if task.total is not None else Text("")

    return WhenCounted()


def with_progress(run: Callable[[Update], T], first: str, *, console: Console | None = None) -> T:
    """Run ``run(update)`` under a transient progress display on stderr (or CONSOLE).

    FIRST names what runs before the first update (typically an import). ``update(what, done, total)``
    names the step that is starting now, with DONE steps finished of TOTAL; a TOTAL of 0 means not
    known yet (a spinner, no count). Each update is drawn at once, not at the next timer tick, so a
    short step is seen under its own name.
    """
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        _when_counted(BarColumn()),
        _when_counted(MofNCompleteColumn()),
        TimeElapsedColumn(),
    )
    console = console or Console(stderr=True)
    if not console.is_terminal:  # a pipe or a CI log: a live display would only leave blank lines there
        return run(lambda what, done, total: None)
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(first, total=None)

        def update(what: str, done: int, total: int) -> None:
            bar.update(task, description=what, completed=done, total=total or None)
            bar.refresh()

        return run(update)
