"""Every report path a command will write, checked before the command does any work.

Why: a verdict must never be masked by its own report. If ``--junit`` or ``$GITHUB_STEP_SUMMARY``
turned out unwritable only after the run, a red verdict (exit 1) would come back as bad input
(exit 2), and an hour of GPU time would end in "cannot write". So ``inspect``, ``roundtrip`` and
``pd-eval`` call ``check_outputs`` first. It creates nothing: each file target is classified by
``kvdoctor.report.target`` (refusing directories, loops, dangling links, FIFOs with no reader…) and
the directory it would be created in must be one this process may write; a FIFO with a reader is
kept open (``kvdoctor.report.atomic.hold``) so the reader waits for the report instead of seeing
an early end of file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from kvdoctor.report import github

if TYPE_CHECKING:
    from kvdoctor.report.target import Target

# ``target`` and ``atomic`` are imported by the checks that read a path: a run that names no report
# path (no --junit, no $GITHUB_STEP_SUMMARY) checks nothing and loads neither.
STEP_SUMMARY = f"${github.STEP_SUMMARY_ENV}"


def check_outputs(
    *, junit_path: Path | None, output_dir: Path | None = None, env: Mapping[str, str] | None = None
) -> None:
    """Raise a one-line ``InputError`` (exit 2) for the first report path that could not be written."""
    if output_dir is not None:
        check_directory("--output-dir", output_dir)
    if junit_path is not None:
        check_file("--junit", junit_path)
    summary = github.step_summary_file(env)
    if summary:
        check_file(STEP_SUMMARY, Path(summary))


def check_file(what: str, path: Path) -> Target:
    """A report file: replaceable (its directory writable) or writable through; never created here."""
    from kvdoctor.report.atomic import hold
    from kvdoctor.report.target import FIFO, MISSING, refusal, resolve

    target = resolve(path, what)
    if target.kind == FIFO:
        hold(target, what=what)
    elif target.through:
        if not os.access(target.given, os.W_OK):
            raise refusal(what, target.given, "is not writable")
    elif target.kind == MISSING:
        _check_creatable(what, target.given, target.real.parent)
    else:
        if not os.access(target.real, os.W_OK):
            raise refusal(what, target.given, "is not writable")
        if not os.access(target.real.parent, os.W_OK | os.X_OK):
            raise refusal(what, target.given, f"cannot be replaced: its directory {target.real.parent} is not writable")
    return target


def check_directory(what: str, path: Path) -> None:
    """A directory reports go into: an existing writable directory, or one we could create."""
    from kvdoctor.report.target import os_error, refusal

    try:
        is_dir = path.is_dir()
    except OSError as exc:  # Python < 3.12 raises on a symlink loop
        raise os_error(path, what, exc) from None
    if is_dir:
        if not os.access(path, os.W_OK | os.X_OK):
            raise refusal(what, path, "is not a writable directory")
        return
    try:
        os.stat(path)
    except FileNotFoundError:
        _check_creatable(what, path, path)
        return
    except OSError as exc:
        raise os_error(path, what, exc) from None
    raise refusal(what, path, "is not a directory")


def _check_creatable(what: str, given: Path, directory: Path) -> None:
    """``directory`` exists and is writable, or its nearest existing ancestor is."""
    from kvdoctor.report.target import refusal

    ancestor = Path(os.path.abspath(directory))
    while not os.path.lexists(ancestor) and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if os.path.islink(ancestor) and not os.path.exists(ancestor):
        raise refusal(what, given, f"cannot be created: {ancestor} is a dangling symlink or a symlink loop")
    if not ancestor.is_dir():
        raise refusal(what, given, f"cannot be created: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise refusal(what, given, f"cannot be created: {ancestor} is not writable")
