"""Every failure a command can meet becomes one line on stderr and its exit code.

- a ``KvdoctorError`` (raised on purpose): ``kvdoctor: error: <message>`` and the class's exit code;
- Ctrl-C: ``kvdoctor: interrupted`` and 130 (128 + SIGINT, what a shell reports);
- any other exception is a kvdoctor bug: ``kvdoctor: internal error: <Type>: <message> (a kvdoctor
  bug; rerun with KVDOCTOR_DEBUG=1 for the traceback)`` and exit 4.

``KVDOCTOR_DEBUG=1`` re-raises instead, so the traceback is there when it is wanted. This module
imports nothing heavy (typer is imported when a command fails), so ``startup_guard`` can wrap the
imports of the CLI itself.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import NoReturn

from kvdoctor._exceptions import InternalError, KvdoctorError, one_line

INTERRUPTED_EXIT = 130
INTERRUPTED_LINE = "kvdoctor: interrupted"


def debug_enabled() -> bool:
    """``KVDOCTOR_DEBUG=1`` keeps full tracebacks (the exception propagates instead of one line)."""
    return os.environ.get("KVDOCTOR_DEBUG", "") not in ("", "0")


def _is_cli_control(exc: BaseException) -> bool:
    """typer's own exits and usage errors: they carry their exit code and must pass through."""
    import typer
    from typer.exceptions import TyperException

    return isinstance(exc, (typer.Exit, typer.Abort, TyperException))


def _exit(line: str, code: int) -> NoReturn:
    import typer

    print(line, file=sys.stderr)
    raise typer.Exit(code)


@contextlib.contextmanager
def exit_on_error() -> Iterator[None]:
    """Run a command body; whatever escapes it becomes one stderr line and its exit code."""
    try:
        yield
    except KvdoctorError as exc:
        if debug_enabled():
            raise
        _exit(one_line(exc), exc.exit_code)
    except KeyboardInterrupt:
        if debug_enabled():
            raise
        _exit(INTERRUPTED_LINE, INTERRUPTED_EXIT)
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
        raise SystemExit(INTERRUPTED_EXIT) from None
