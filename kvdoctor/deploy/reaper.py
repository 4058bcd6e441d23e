"""Linux process-lifetime controls: kvdoctor as the child subreaper of its run, and children that
die with kvdoctor.

Why: process groups and an environment marker miss a server that calls ``setsid``, double-forks
and clears its environment: the daemon is reparented to init, carries no marker, and outlives the
run while the run says PASSED. As a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``) kvdoctor
becomes the new parent of every orphan below it instead of init, so teardown finds such a daemon
among its own children. And if kvdoctor itself is SIGKILLed, no teardown runs at all, so every
server starts with a *parent-death signal* (``prctl(PR_SET_PDEATHSIG, SIGKILL)``): the kernel kills
it when kvdoctor dies.

Both are Linux facilities (via ctypes, no extra dependency); elsewhere these functions do nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Callable, Iterator

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    prctl = libc.prctl
    prctl.restype = ctypes.c_int
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return prctl  # type: ignore[no-any-return]


# Looked up once, in the parent: a forked child must call it without loading anything.
_PRCTL = _prctl()


def is_subreaper() -> bool:
    if _PRCTL is None:
        return False
    value = ctypes.c_int(0)
    if _PRCTL(PR_GET_CHILD_SUBREAPER, ctypes.addressof(value), 0, 0, 0) != 0:
        return False
    return bool(value.value)


@contextlib.contextmanager
def child_subreaper() -> Iterator[bool]:
    """For the block, orphans of our descendants are reparented to us; yields whether that holds."""
    if _PRCTL is None:
        yield False
        return
    before = is_subreaper()
    enabled = _PRCTL(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    try:
        yield enabled
    finally:
        if enabled and not before:
            _PRCTL(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child receive ``sig`` when this process dies.

    The kernel sends it when the *thread* that forked the child exits, so start children from the
    thread that lives as long as the run (the main thread). If we died between fork and prctl,
    the child is already orphaned: it kills itself.
    """
    if _PRCTL is None:
        return None
    prctl, parent = _PRCTL, os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)

    return preexec
