"""A signal that lands while a server is being forked: one ``Interrupted`` from ``start`` once the child is
recorded (so teardown stops it), never an exception inside an at-fork hook, which Python prints as "Exception
ignored in: <function _releaseLock>" with a traceback (logging's hook; issue 28, defect 8)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvdoctor._exceptions import Interrupted
from kvdoctor.deploy import supervisor as supervisor_module
from kvdoctor.deploy.signals import signals_raise
from kvdoctor.deploy.supervisor import Supervisor
from tests.pd.helpers import pid_alive

_ARMED: list[signal.Signals] = []  # the signal the at-fork hook sends on the next fork (once), if any


def _send_after_fork() -> None:
    """Registered once per process (at-fork hooks cannot be removed), inert unless a test arms it. Runs in the
    parent right after ``fork``, where logging's ``_releaseLock`` runs; ``raise_signal`` runs the Python
    handler before it returns, so the handler runs inside the hook, every time."""
    if _ARMED:
        signal.raise_signal(_ARMED.pop())


os.register_at_fork(after_in_parent=_send_after_fork)


@pytest.fixture
def unraisable(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """What Python would print as "Exception ignored in: ..." (an exception raised inside an at-fork hook)."""
    seen: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    yield seen
    _ARMED.clear()


@pytest.fixture
def sigint_live() -> Iterator[None]:
    """SIGINT at Python's Ctrl-C handler for the test, as a foreground shell starts a run. A CI runner that starts
    the suite in the background (``setsid bash -c 'make test' < /dev/null &``, ``nohup``) passes SIGINT on ignored,
    and supervision keeps an inherited ignore (``test_a_signal_ignored_from_the_start_stays_ignored_under_supervision``
    below): without this, the SIGINT case would test that rule instead of the fork's, and fail however it is run."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are installed from the main thread only")
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_the_fork_is_raised_once_the_server_is_recorded(
    sig: signal.Signals, tmp_path: Path, unraisable: list[Any], no_leftovers: str, sigint_live: None
) -> None:
    assert supervisor_module.PARENT_DEATH_SIGNAL is not None  # a preexec_fn: Popen forks and runs at-fork hooks
    started: list[int] = []
    with (
        pytest.raises(Interrupted) as raised,  # around the with block: its teardown is part of the contract
        signals_raise() as latch,
        Supervisor(tmp_path, latch=latch, grace_s=5.0) as supervisor,
    ):
        _ARMED.append(sig)
        try:
            supervisor.start("decode", ("python", "-c", "import time; time.sleep(60)"), {})
        finally:
            started += [p.pid for p in supervisor.procs]
    assert raised.value.signum == sig
    assert not _ARMED, "the fork hook never ran"
    assert [u.exc_type.__name__ for u in unraisable] == []  # nothing printed from inside the hook
    assert len(started) == 1 and not pid_alive(started[0])  # recorded, then stopped by the teardown


def test_a_signal_inside_an_event_loops_deferral_still_waits_for_check(tmp_path: Path, unraisable: list[Any]) -> None:
    """``held`` nests: inside ``deferred`` (an event loop) the signal still waits for the watchdog's check."""
    with signals_raise() as latch, latch.deferred():
        with latch.held():
            signal.raise_signal(signal.SIGTERM)
        assert latch.signum == signal.SIGTERM  # recorded, not raised: the event loop must not see it
        with pytest.raises(Interrupted):
            latch.check()
        latch.signum = None  # handled: deferred's exit check must not raise again
    assert unraisable == []


def test_a_signal_ignored_from_the_start_stays_ignored_under_supervision() -> None:
    """``nohup kvdoctor consistency … &`` starts with SIGINT ignored: supervision must not turn Ctrl-C back on
    (Python's rule for a signal ignored at start-up, as the README says), while SIGTERM still stops every server."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are installed from the main thread only")
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with signals_raise() as latch:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) == latch.handler
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
