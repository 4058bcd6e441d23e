"""One progress bar for long commands: the step running now, M of N done, time elapsed (rich's columns)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
Update = Callable[[str, int, int], None]  # (what is running, steps done, steps in all)


def with_progress(run: Callable[[Update], T], first: str) -> T:
    """Run ``run(update)`` under a transient progress bar on stderr; FIRST names the step before any update."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(first, total=None)

        def update(what: str, done: int, total: int) -> None:
            bar.update(task, description=what, completed=done, total=total or None)

        return run(update)
