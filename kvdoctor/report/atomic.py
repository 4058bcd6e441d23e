"""Write a report so that readers see the old content or the new, never half of it, and so that
writing it never destroys what the path pointed at.

Why: a CI step that reads a report while kvdoctor is killed must not parse a truncated file, so a
regular file is replaced by renaming a finished temp file over it. Only a regular file (or a path
that does not exist yet) is replaced that way; ``kvdoctor.report.target`` decides, and anything
else that may take a report (a character device such as /dev/null, a FIFO with a reader, an open
file behind /dev/stdout) is written *through*: opened and written in place, all at once when the
report is complete. A symlink is followed; its final target is replaced, never the link.

Our own temp files go on every exit path: an exception (Ctrl-C included) removes them, and while
one exists a SIGTERM that would otherwise kill the process outright (the default action, which
runs no cleanup) is turned into ``SystemExit(143)`` that unwinds through the same cleanup.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import os
import signal
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from kvdoctor._exceptions import Interrupted
from kvdoctor.report.target import FIFO, REGULAR, Target, refusal, resolve

# FIFOs opened by a preflight check (``hold``), kept open so that their reader does not see an early
# end of file, and written by the report later. Keyed by (device, inode).
_HELD: dict[tuple[int, int], int] = {}


@contextlib.contextmanager
def atomic_open(path: Path, mode: str = "w", *, what: str = "") -> Iterator[IO]:  # type: ignore[type-arg]
    """A file handle whose content lands at ``path`` only when the block completes.

    A regular (or new) file: a temp file next to the final target, renamed over it. A device or
    FIFO: an in-memory buffer written through in one go. ``what`` names the option in errors.
    """
    target = resolve(Path(path), what)
    binary = "b" in mode
    with unwind_on_sigterm():
        if target.through:
            buffer: IO = io.BytesIO() if binary else io.StringIO()  # type: ignore[type-arg]
            yield buffer
            data = buffer.getvalue()
            write_through(target, data if binary else data.encode("utf-8"), what=what)
            return
        target.real.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.real.parent, prefix=f".{target.real.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, mode, **({} if binary else {"encoding": "utf-8"})) as fh:
                yield fh
                fh.flush()
                _give_mode(fh.fileno(), target)
                os.fsync(fh.fileno())
            os.replace(tmp, target.real)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def write_text(path: Path, text: str, *, what: str = "") -> None:
    with atomic_open(path, what=what) as fh:
        fh.write(text)


def write_through(target: Target, data: bytes, *, what: str = "", append: bool = False) -> None:
    """Write ``data`` into a file that must not be replaced (device, FIFO, /proc fd link)."""
    fd = _take_held(target)
    if fd is None:
        fd = open_through(target, what=what, append=append)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def open_through(target: Target, *, what: str = "", append: bool = False) -> int:
    """Open for writing without blocking: a FIFO with no reader is refused (ENXIO), not waited on."""
    flags = os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC | os.O_NONBLOCK
    if append or target.kind == REGULAR:
        flags |= os.O_APPEND
    try:
        fd = os.open(target.given, flags)
    except OSError as exc:
        if exc.errno == errno.ENXIO and target.kind == FIFO:
            raise refusal(what, target.given, "is a FIFO with no reader (start the reader first)") from None
        if exc.errno == errno.ENXIO:
            raise refusal(what, target.given, "is a device with nothing behind it (ENXIO)") from None
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise refusal(what, target.given, "is not writable") from None
        raise refusal(what, target.given, f"cannot be opened: {exc.strerror or exc}") from None
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


def hold(target: Target, *, what: str = "") -> None:
    """Open a FIFO target now (refusing one with no reader) and keep it open for the report."""
    if target.kind != FIFO or _key(target) in _HELD:
        return
    fd = open_through(target, what=what)
    key = _key(target)
    if key is None:
        os.close(fd)
        return
    _HELD[key] = fd


def _take_held(target: Target) -> int | None:
    key = _key(target)
    return None if key is None else _HELD.pop(key, None)


def _key(target: Target) -> tuple[int, int] | None:
    try:
        st = os.stat(target.given)
    except OSError:
        return None
    return st.st_dev, st.st_ino


@contextlib.contextmanager
def unwind_on_sigterm() -> Iterator[None]:
    """While the block runs, a SIGTERM left at its default action raises ``SystemExit(143)``.

    The default action kills the process without running ``finally`` blocks, which would leave a
    ``.name.*.tmp`` behind forever. A handler someone else installed (pd-eval's latch) is kept.
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return

    def handler(signum: int, _frame: object) -> None:
        raise SystemExit(Interrupted.exit_code_for(signum))

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _give_mode(fd: int, target: Target) -> None:
    """The mode (and owner) ``open(path, "w")`` would leave: the old file's, else umask's default."""
    try:
        old = os.stat(target.real) if target.exists else None
    except OSError:
        old = None
    if old is None:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp creates 0600
        return
    os.fchmod(fd, stat.S_IMODE(old.st_mode))
    with contextlib.suppress(OSError):  # only root may give a file away; others keep their own
        os.fchown(fd, old.st_uid, old.st_gid)


def _umask() -> int:
    """The process umask (reading it means setting it; restored at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
