"""Write a file so that readers see the old content or the new, never half of it.

Why: a CI step that reads a report while kvdoctor is killed must not parse a truncated file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO


@contextlib.contextmanager
def atomic_open(path: Path, mode: str = "w") -> Iterator[IO]:  # type: ignore[type-arg]
    """A temp file next to ``path``, renamed over it only when the block completes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
            yield fh
            fh.flush()
            # mkstemp creates 0600; a report must get the mode open() would give it.
            os.fchmod(fh.fileno(), 0o666 & ~_umask())
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    with atomic_open(path) as fh:
        fh.write(text)


def _umask() -> int:
    """The process umask (reading it means setting it; restored at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
