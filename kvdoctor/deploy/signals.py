"""Ctrl-C and SIGTERM become an ``Interrupted`` exception, raised where it is safe to raise.

Why a latch: an exception raised from a signal handler lands in whatever code runs at that
instant. In plain code that is what we want (the ``with`` blocks unwind and tear down). Inside an
asyncio event loop it is not: asyncio's transports catch ``BaseException`` around socket writes
and report it as a "fatal write error", swallowing the signal (seen in the SIGTERM test under
load). So while an event loop runs, the handler only records the signal and the eval's watchdog
raises it at its next tick (every 0.1 s). The same holds while a server is forked (``held``): Python runs
at-fork hooks (logging's ``_releaseLock``) around ``fork``, and an exception raised inside one is printed as
"Exception ignored" with a traceback instead of unwinding.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from kvdoctor._exceptions import Interrupted

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class SignalLatch:
    """Remembers the first signal; raises it now (plain code) or at ``check()`` (event loop)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._deferring = False

    def handler(self, signum: int, _frame: object) -> None:
        if self.signum is not None:
            # Already unwinding: a second Ctrl-C raised now would land in a ``__exit__`` and
            # skip the teardown it interrupts.
            return
        self.signum = signum
        if not self._deferring:
            raise Interrupted(signum)

    def check(self) -> None:
        if self.signum is not None:
            raise Interrupted(self.signum)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """While the block runs, a signal is only recorded; it is raised when the block has finished (inside a
        ``deferred`` block, at the next ``check()`` as before). The block's own exception goes first."""
        before = self._deferring
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = before
        if not before:
            self.check()

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """While the block (an event loop) runs, signals wait for ``check()``."""
        self.check()
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
        self.check()


@contextlib.contextmanager
def signals_raise() -> Iterator[SignalLatch]:
    """Install the latch's handler for SIGTERM and SIGINT (main thread; elsewhere a no-op)."""
    latch = SignalLatch()
    with _handlers(latch.handler):
        yield latch


@contextlib.contextmanager
def signals_ignored() -> Iterator[None]:
    """Ignore SIGTERM and SIGINT for the duration: half a teardown would leak processes."""
    with _handlers(signal.SIG_IGN):
        yield


@contextlib.contextmanager
def _handlers(handler: signal.Handlers | Callable[[int, Any], None]) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {
        sig: signal.signal(sig, handler)
        for sig in SIGNALS
        if handler is signal.SIG_IGN or signal.getsignal(sig) is not signal.SIG_IGN
    }  # a signal ignored from the start (a background shell's ``&`` ignores SIGINT) stays ignored, as Python's rule is
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
