"""Turn a ``KvdoctorError`` into one line on stderr and its exit code (tracebacks only with --debug)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

import typer

from kvdoctor.errors import KvdoctorError, one_line


def debug_enabled() -> bool:
    """``KVDOCTOR_DEBUG=1`` (or the --debug option, which sets it) keeps full tracebacks."""
    return os.environ.get("KVDOCTOR_DEBUG", "") not in ("", "0")


@contextlib.contextmanager
def exit_on_error() -> Iterator[None]:
    """Run a command body; a ``KvdoctorError`` becomes ``kvdoctor: error: …`` and its exit code."""
    try:
        yield
    except KvdoctorError as exc:
        if debug_enabled():
            raise
        print(one_line(exc), file=sys.stderr)
        raise typer.Exit(exc.exit_code) from None
