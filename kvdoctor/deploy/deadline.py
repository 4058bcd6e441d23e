"""The run's ``--timeout`` as one deadline that every blocking step of a pd-eval honours.

Why: ``--timeout 15`` once took 47 s, because the ``/server_info`` and ``/metrics`` probes ran with
their own 10 s timeouts, outside both the deadline and the watchdog that notices a dead server. So
a blocking probe runs through ``Deadline.call``: in a worker thread, its own timeout capped at the
time left, while this thread keeps calling the watchdog every 0.1 s and raises ``EvalTimeout``
(exit 3, reason ``timeout``) the moment the deadline passes. A signal lands in this thread as
usual (it only waits), so Ctrl-C and SIGTERM still unwind at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from kvdoctor._exceptions import EvalTimeout

T = TypeVar("T")
TICK_S = 0.1
MIN_REQUEST_S = 0.1  # a probe's own timeout never drops below this (httpx needs a positive one)


@dataclass(frozen=True)
class Deadline:
    """``budget_s`` seconds from ``started`` (a ``time.monotonic()`` reading)."""

    budget_s: float
    started: float = field(default_factory=time.monotonic)

    @property
    def at(self) -> float:
        return self.started + self.budget_s

    def left(self) -> float:
        return max(0.0, self.at - time.monotonic())

    def request_timeout(self, cap_s: float) -> float:
        """A single request's timeout: ``cap_s``, but never past the deadline."""
        return max(MIN_REQUEST_S, min(cap_s, self.left()))

    def expired(self, what: str) -> EvalTimeout:
        return EvalTimeout(f"{what} did not finish within --timeout {self.budget_s:g} s")

    def call(self, fn: Callable[[], T], *, what: str, watchdog: Callable[[], None] | None = None) -> T:
        """``fn()``'s result, or ``EvalTimeout`` at the deadline; ``watchdog`` may raise meanwhile."""
        if self.left() <= 0:
            raise self.expired(what)
        box: _Box[T] = _Box()
        worker = threading.Thread(target=box.run, args=(fn,), name=f"kvdoctor: {what}", daemon=True)
        worker.start()
        while not box.done.wait(min(TICK_S, self.left())):
            if watchdog is not None:
                watchdog()
            if self.left() <= 0:
                raise self.expired(what)
        if box.error is not None:
            raise box.error
        return box.value  # type: ignore[return-value]


class _Box(Generic[T]):
    """What the worker thread produced: a value or the exception it raised."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: T | None = None
        self.error: BaseException | None = None

    def run(self, fn: Callable[[], T]) -> None:
        try:
            self.value = fn()
        except BaseException as exc:  # handed to the waiting thread, which re-raises it
            self.error = exc
        finally:
            self.done.set()
