"""Every failure a command can meet becomes one line on stderr and its exit code.

- a ``KvdoctorError`` (raised on purpose): ``kvdoctor: error: <message>`` and the class's exit code
  (a reader of stdout that went away, ``kvdoctor.cli.streams.ReaderGone``, is quiet: 141 alone);
- Ctrl-C: ``kvdoctor: interrupted`` and 130 (128 + SIGINT, what a shell reports);
- SIGTERM: ``kvdoctor: terminated`` and 143 (128 + SIGTERM): ``signals_handled`` turns it into
  ``kvdoctor.Interrupted``, which unwinds like Ctrl-C, so every ``with`` block (temp files, the JUnit
  error case of ``kvdoctor.report.verdicts.errors_published``) runs on the way out;
- any other exception is a kvdoctor bug: ``kvdoctor: internal error: <Type>: <message> (a kvdoctor
  bug; rerun with KVDOCTOR_DEBUG=1 for the traceback)`` and exit 4.

``KVDOCTOR_DEBUG=1`` re-raises instead, so the traceback is there when it is wanted. This module
imports nothing heavy (typer is imported when a command fails), so ``startup_guard`` can wrap the
imports of the CLI itself.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import NoReturn

from kvdoctor._exceptions import EXIT_SIGINT, InternalError, Interrupted, KvdoctorError, one_line

INTERRUPTED_LINE = "kvdoctor: interrupted"

# What this process last told the user on stderr (or, for a quiet exit, would have): the reason a run
# that did not finish gives in its JUnit error case (``kvdoctor.report.verdicts.unfinished``).
_SAID: list[str] = []


def debug_enabled() -> bool:
    """``KVDOCTOR_DEBUG=1`` keeps full tracebacks (the exception propagates instead of one line)."""
    return os.environ.get("KVDOCTOR_DEBUG", "") not in ("", "0")


def forget() -> None:
    """A new run starts (the CLI may run more than once in one process): nothing said yet."""
    _SAID.clear()


def say(line: str | None, reason: str | None = None) -> None:
    """Print LINE on stderr (None: nothing, a quiet exit) and remember it (or REASON) as the run's last word."""
    _SAID.append(reason or line or "")
    if line is not None:
        print(line, file=sys.stderr)


def last_said() -> str | None:
    """The last line :func:`say` printed (or its reason), if any."""
    return _SAID[-1] if _SAID and _SAID[-1] else None


def error_line(exc: KvdoctorError) -> str | None:
    """The one stderr line for EXC, or None for a failure its exit code alone reports (EPIPE: 141)."""
    return None if getattr(exc, "quiet", False) else one_line(exc)


def signal_exit(signum: int) -> tuple[str, int]:
    """The line and exit code of a run a signal stopped: 130 for Ctrl-C, 143 for SIGTERM, 128+N otherwise."""
    return f"kvdoctor: {Interrupted.word(signum)}", Interrupted.exit_code_for(signum)


def _terminated(signum: int, _frame: object) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def signals_handled() -> Iterator[None]:
    """While the block runs, SIGTERM raises ``Interrupted`` (as Ctrl-C raises KeyboardInterrupt).

    Its default action kills the process on the spot: no ``finally`` runs, so no JUnit error case is
    written and an earlier green file stays. Entered by the console-script entry around every command;
    a SIGTERM the parent set to be ignored stays ignored, and a command's own handlers (pd-eval's latch)
    replace this one while they are installed and restore it after. The previous handler is given back
    after the block (a caller that runs the CLI in-process keeps its own).
    """
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _is_cli_control(exc: BaseException) -> bool:
    """typer's own exits and usage errors: they carry their exit code and must pass through."""
    import typer
    from typer.exceptions import TyperException

    return isinstance(exc, (typer.Exit, typer.Abort, TyperException))


def _exit(line: str | None, code: int, reason: str | None = None) -> NoReturn:
    import typer

    say(line, reason)
    raise typer.Exit(code)


@contextlib.contextmanager
def exit_on_error() -> Iterator[None]:
    """Run a command body; whatever escapes it becomes one stderr line and its exit code."""
    try:
        yield
    except KvdoctorError as exc:
        if debug_enabled():
            raise
        _exit(error_line(exc), exc.exit_code, str(exc))
    except KeyboardInterrupt:
        if debug_enabled():
            raise
        _exit(INTERRUPTED_LINE, EXIT_SIGINT)
    except Interrupted as exc:
        if debug_enabled():
            raise
        _exit(*signal_exit(exc.signum))
    except Exception as exc:
        if debug_enabled() or _is_cli_control(exc):
            raise
        _exit(one_line(InternalError.wrap(exc)), InternalError.exit_code)


@contextlib.contextmanager
def startup_guard() -> Iterator[None]:
    """Ctrl-C while the CLI's own modules are still importing: one line and 130, no traceback."""
    try:
        yield
    except KeyboardInterrupt:
        if debug_enabled():
            raise
        print(INTERRUPTED_LINE, file=sys.stderr)
        raise SystemExit(EXIT_SIGINT) from None
