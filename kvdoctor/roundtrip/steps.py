"""The round trip's five steps, in one order for every engine: fill, retract, reuse, restore, diff.

Each engine (kvdoctor's own pools in ``kvdoctor.state.run``, the installed SGLang's in
``kvdoctor.engines.sglang.roundtrip``) implements a :class:`Driver`: one method per step, over its own
pools and its own retraction code. :func:`run_steps` walks them in order and reports each step to the
progress bar as it starts, so both engines run, and show, the same protocol:

1. build the pools; 2. fill the requests; 3. retract (back up, then release) each retracted request;
4. intruders take every slot the retracted requests freed; 5. restore each retracted request into slots
it never held; then diff every component against what it held before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from kvdoctor.roundtrip.result import RoundtripResult

__all__ = ["INTRUDER_BASE", "Driver", "Progress", "StepNames", "Steps", "run_steps"]

Progress = Callable[[str, int, int], None]  # (what is running now, steps finished, steps in all)
INTRUDER_BASE = 1_000_000  # an intruder's request id: INTRUDER_BASE + the id of the request whose slots it takes


class Steps:
    """Reports each step as it STARTS, so a progress bar names what is running, not what just ended.

    ``start(what)`` reports (WHAT, steps finished, TOTAL); ``finish()`` reports every step finished.
    TOTAL must be the number of ``start`` calls the run makes.
    """

    def __init__(self, report: Progress, total: int) -> None:
        self.report, self.total, self.done, self._running = report, total, 0, False

    def start(self, what: str) -> None:
        if self._running:
            self.done += 1
        self._running = True
        self.report(what, self.done, self.total)

    def finish(self) -> None:
        self.done = self.total
        self.report("done", self.total, self.total)


@dataclass(frozen=True)
class StepNames:
    """How an engine names the steps that differ between engines (``{rid}``: the request's id)."""

    build: str
    offload: str
    restore: str


class Driver(Protocol):
    """One engine's steps of a round trip, each run once and in :func:`run_steps`' order."""

    names: StepNames

    def build(self) -> None:
        """Build the pools (and everything the run checks about them before it writes a byte)."""

    def instrumented(self) -> contextlib.AbstractContextManager[None]:
        """Held from the fill to the last restore (an engine's wrappers on the server's objects)."""

    def fill(self) -> None:
        """Write every request's state (and the background every other slot holds)."""

    def offload(self, rid: int) -> None:
        """Back request RID's state up, then release its slots."""

    def reuse(self) -> None:
        """New requests take, and overwrite, every slot the retracted requests freed."""

    def restore(self, rid: int) -> None:
        """Admit request RID again, into new slots, and restore its state from the backup."""

    def restored(self) -> None:
        """Every retracted request is back."""

    def diff(self) -> RoundtripResult:
        """Compare every component with what it held before; the verdict."""


@contextlib.contextmanager
def nothing_held() -> Iterator[None]:
    """:meth:`Driver.instrumented` for an engine that wraps nothing."""
    yield


def run_steps(driver: Driver, retracted: Sequence[int], report: Progress) -> RoundtripResult:
    """Walk DRIVER through the five steps for the RETRACTED requests, reporting each step as it starts."""
    steps = Steps(report, 4 + 2 * len(retracted))
    steps.start(driver.names.build)
    driver.build()
    with driver.instrumented():
        steps.start("fill requests")
        driver.fill()
        for rid in retracted:
            steps.start(driver.names.offload.format(rid=rid))
            driver.offload(rid)
        steps.start("intruders reuse the freed slots")
        driver.reuse()
        for rid in retracted:
            steps.start(driver.names.restore.format(rid=rid))
            driver.restore(rid)
        driver.restored()
    steps.start("diff every component")
    result = driver.diff()
    steps.finish()
    return result
