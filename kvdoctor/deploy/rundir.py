"""Each pd-eval run writes into a fresh directory of its own: ``<output-dir>/run-<time>-<id>/``.

Why: a run used to clear ``result.json``, ``questions.*`` and the role logs out of ``--output-dir``
before launching, deleting files someone else (or an earlier run they still needed) had put there.
A run now never deletes or overwrites a file it did not write itself: it creates a new directory,
exclusively (``mkdir`` fails rather than reuse one), and reports its path (on the terminal and as
``run_dir`` in the JSON). Names sort by start time; the random suffix keeps parallel runs apart.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from kvdoctor._exceptions import InputError

PREFIX = "run-"
ATTEMPTS = 5


def create(output_dir: Path) -> Path:
    """Make and return a new, empty run directory under ``output_dir`` (created if missing)."""
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        for _ in range(ATTEMPTS):
            path = output_dir / f"{PREFIX}{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
            try:
                path.mkdir()
            except FileExistsError:
                continue
            return path
    except OSError as exc:
        raise InputError(
            f"--output-dir {output_dir}: cannot create a run directory there: {exc.strerror or exc}"
        ) from None
    raise InputError(f"--output-dir {output_dir}: cannot create a fresh run directory there")
