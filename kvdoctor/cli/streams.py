"""Standard output and standard error as every command writes them: delivered, or reported as lost.

Why: a report that never reached its reader is not a green run. Left alone, Python and click hide
that: with stdout closed (``>&-``) ``sys.stdout`` is ``None`` and every write vanishes (exit 0);
a vanished reader (``| head -c0``) raises EPIPE, which click turns into a silent exit 1 that reads
as "gate failed"; a full disk (``>/dev/full``) surfaces as an OSError, reported as a kvdoctor bug.
And under ``LC_ALL=C`` (or ``PYTHONIOENCODING=latin-1``) the verdict line's dash raises
UnicodeEncodeError in a green run.

``guarded()`` (entered by the console-script entry around every command) puts one guard in front of
each stream:

- stdout: every write is flushed at once, so a failure is raised where the report is written, as
  :class:`OutputLost` (exit 2, one line) or, for EPIPE, :class:`ReaderGone` (exit 141, quiet, as a
  shell reports a process killed by SIGPIPE). The descriptor is then pointed at ``/dev/null`` (what
  Python's documentation recommends after a BrokenPipeError) so the interpreter's final flush cannot
  raise again. The guard's ``lost()`` remembers the first failure, so the entry never exits 0 after one.
- stderr: closed or gone, its lines are dropped, never a crash.
- both: characters the stream's encoding cannot carry are written in ASCII (``—`` as ``-``, ``…`` as
  ``...``, box drawing as ``-``, ``|`` and ``+``) instead of raising; ``--json`` is ASCII already.

The guards expose no ``buffer``: click would otherwise write through it and around the guard.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from kvdoctor._exceptions import EXIT_SIGPIPE, InputError, KvdoctorError

ASCII_ERRORS = "kvdoctor-ascii"  # the codec error handler installed on both streams

_SPELLED = {
    "\u2014": "-",  # — em dash (the verdict line)
    "\u2013": "-",  # – en dash (a value that is none)
    "\u2026": "...",  # …
    "\u2192": "->",  # →
    "\u00b7": "-",  # ·
    "\u00a7": "S",  # §
    "\u02bc": "'",  # ʼ
    "\u2019": "'",
    "\u2018": "'",
    "\u201c": '"',
    "\u201d": '"',
    "\u2265": ">=",  # ≥
    "\u2264": "<=",
    "\u00d7": "x",  # ×
    "\u00b5": "u",  # µ
    "\u2248": "~",  # ≈
    "\u2713": "ok",  # ✓
    "\u2705": "ok",  # ✅
    "\u274c": "x",  # ❌
    "\u26a0": "!",  # ⚠
    "\ufe0f": "",  # the emoji variation selector after ⚠
    "\U0001f4a5": "!",  # 💥
    "\u00a0": " ",
}


class OutputLost(InputError):
    """Standard output is closed, or a write to it failed (a full disk, EIO). Exit 2."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"cannot write the report to standard output: {reason}")


class ReaderGone(KvdoctorError):
    """The reader of standard output went away (EPIPE). Exit 141 and no line: the reader chose to stop
    reading (``| head``), and a shell reports the same for a process that SIGPIPE killed."""

    exit_code = EXIT_SIGPIPE  # 141, 128 + SIGPIPE: what a shell reports for a process SIGPIPE killed
    quiet = True

    def __init__(self) -> None:
        super().__init__("the reader of standard output went away (EPIPE) before the report was written")


def _in_ascii(ch: str) -> str | bytes:
    import unicodedata  # a shared library: loaded only when a character must be spelled in ASCII

    if "\udc80" <= ch <= "\udcff":  # a byte argv could not decode (surrogateescape): give it back as it came
        return bytes([ord(ch) - 0xDC00])
    if ch in _SPELLED:
        return _SPELLED[ch]
    code = ord(ch)
    if 0x2500 <= code <= 0x257F:  # box drawing: rich's tables fall back to ASCII; anything else that draws
        name = unicodedata.name(ch, "")
        return "-" if "HORIZONTAL" in name and "VERTICAL" not in name else "|" if "VERTICAL" in name else "+"
    if 0x2580 <= code <= 0x259F:  # block elements (bars)
        return "#"
    base = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode("ascii")
    return base or "?"


def _ascii_errors(exc: UnicodeError) -> tuple[str | bytes, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    return _in_ascii(exc.object[exc.start]), exc.start + 1


codecs.register_error(ASCII_ERRORS, _ascii_errors)


class _Guard:
    """A text stream in front of STREAM (``None``: closed when the process started)."""

    def __init__(self, stream: TextIO | None, *, name: str, tolerant: bool) -> None:
        self._stream = stream
        self._name = name
        self._tolerant = tolerant  # stderr: a failed write is dropped; stdout: it is raised
        self.failure: KvdoctorError | None = None

    # -- what writers call --
    def write(self, text: str) -> int:
        if not isinstance(text, str):  # click probes for a binary stream with write(b""): this one is text
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if not text:
            return 0
        if self.failure is not None:
            return self._failed()
        if self._stream is None:
            self._fail(OutputLost("it was closed before kvdoctor started"))
            return self._failed()
        try:
            self._stream.write(text)
            self._stream.flush()
        except ValueError:  # "I/O operation on closed file": the stream object itself was closed
            self._fail(OutputLost("it is closed"))
            return self._failed()
        except OSError as exc:
            self._fail(ReaderGone() if exc.errno == errno.EPIPE else OutputLost(exc.strerror or str(exc)))
            return self._failed()
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self.failure is not None or self._stream is None:
            return
        try:
            self._stream.flush()
        except ValueError:
            self._fail(OutputLost("it is closed"))
            self._failed()
        except OSError as exc:
            self._fail(ReaderGone() if exc.errno == errno.EPIPE else OutputLost(exc.strerror or str(exc)))
            self._failed()

    def lost(self) -> KvdoctorError | None:
        """The first failure to deliver this stream (after a last flush), else None."""
        with contextlib.suppress(KvdoctorError):
            self.flush()
        return self.failure

    def _fail(self, failure: KvdoctorError) -> None:
        self.failure = failure
        if self._stream is not None:  # the interpreter's last flush would raise again: let it write nowhere
            _point_at_devnull(self._stream)

    def _failed(self) -> int:
        if self._tolerant or self.failure is None:
            return 0
        raise self.failure

    # -- what renderers ask --
    def isatty(self) -> bool:
        try:
            return self._stream is not None and self.failure is None and self._stream.isatty()
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        if self._stream is None:
            raise OSError(errno.EBADF, f"{self._name} is closed")
        return self._stream.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self._stream, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str:
        return getattr(self._stream, "errors", None) or "strict"

    @property
    def name(self) -> str:
        return f"<{self._name}>"

    @property
    def closed(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False


def _point_at_devnull(stream: TextIO) -> None:
    try:
        fd = stream.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError):
        return
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


def _occupy(fd: int) -> None:
    """A standard descriptor closed at start-up gets /dev/null, so no file the run opens later lands on
    it (a JUnit file written as "stdout") and a child process starts with all three."""
    try:
        os.fstat(fd)
        return
    except OSError:
        pass
    try:
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    if null != fd:
        os.dup2(null, fd)
        os.close(null)


def _with_ascii_errors(stream: TextIO | None) -> str | None:
    """Make STREAM write what its encoding cannot carry in ASCII; returns its error handler before."""
    reconfigure = getattr(stream, "reconfigure", None)
    before = getattr(stream, "errors", None)
    if reconfigure is None or before is None:
        return None
    with contextlib.suppress(ValueError, OSError):  # a stream already detached or closed: left as it is
        reconfigure(errors=ASCII_ERRORS)
        return before
    return None


def _restore_errors(stream: TextIO | None, before: str | None) -> None:
    if before is not None:
        with contextlib.suppress(ValueError, OSError, AttributeError):
            stream.reconfigure(errors=before)  # type: ignore[union-attr]


@contextlib.contextmanager
def guarded() -> Iterator[_Guard]:
    """Guard sys.stdout and sys.stderr while the block runs (the console-script entry runs every command
    inside); yields the stdout guard, whose ``lost()`` says whether the report was delivered. The streams
    (and their error handlers) are given back after, so a caller that runs the CLI in-process keeps its own."""
    stdout, stderr = sys.stdout, sys.stderr
    if isinstance(stdout, _Guard):  # already inside (a nested call): the same guards
        yield stdout
        return
    for fd, stream in ((1, stdout), (2, stderr)):
        if stream is None:
            _occupy(fd)
    before = (_with_ascii_errors(stdout), _with_ascii_errors(stderr))
    out = _Guard(stdout, name="standard output", tolerant=False)
    sys.stdout = out  # type: ignore[assignment]
    sys.stderr = _Guard(stderr, name="standard error", tolerant=True)  # type: ignore[assignment]
    try:
        yield out
    finally:
        sys.stdout, sys.stderr = stdout, stderr
        _restore_errors(stdout, before[0])
        _restore_errors(stderr, before[1])
