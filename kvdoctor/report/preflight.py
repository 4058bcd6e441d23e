"""Every report path a command will write, checked before the command does any work.

Why: a verdict must never be masked by its own report. If ``--junit`` or ``$GITHUB_STEP_SUMMARY``
turned out unwritable only after the run, a red verdict (exit 1) would come back as bad input
(exit 2), and an hour of GPU time would end in "cannot write". So ``inspect``, ``roundtrip`` and
``pd-eval`` call ``check_outputs`` first. Each file target is classified by ``kvdoctor.report.target``
(refusing directories, loops, dangling links, FIFOs with no reader…) and the directory it would be created
in must be one this process can create a file in; a FIFO with a reader is kept open
(``kvdoctor.report.atomic.hold``) so the reader waits for the report instead of seeing an early end of file.

Writability is proven, not asked: ``os.access`` answers for the real uid with the *permitted* capabilities,
so to root it says yes for ``/proc`` (where no file can be created), and for a ``chmod 444`` file or a
``chmod 555`` directory in a process whose effective ``CAP_DAC_OVERRIDE`` was dropped (a sandbox, a CI
runner), while the write at the end fails. So a directory is proven by creating and removing a temp file
of our own in it (``mkstemp``: a new name, ``O_EXCL``, removed at once, on SIGTERM too), and an existing
file by opening it for appending without writing a byte (no content, size or mtime changes). Nothing that
kvdoctor did not create is deleted or changed.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from kvdoctor.report import github

if TYPE_CHECKING:
    from kvdoctor.report.target import Target

# ``target`` and ``atomic`` are imported by the checks that read a path: a run that names no report
# path (no --junit, no $GITHUB_STEP_SUMMARY) checks nothing and loads neither.
STEP_SUMMARY = f"${github.STEP_SUMMARY_ENV}"
PROBE_PREFIX = ".kvdoctor-preflight-"  # the temp file that proves a directory (removed at once)


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
    from kvdoctor.report.target import FIFO, MISSING, REGULAR, refusal, resolve

    target = resolve(path, what)
    if target.kind == FIFO:
        hold(target, what=what)
    elif target.through:
        if target.kind == REGULAR:  # an open file behind /proc/<pid>/fd: appended to at the end
            _check_appendable(what, target.given, target.given)
        elif not os.access(target.given, os.W_OK):  # a device: opening one may act (a tape rewinds on close)
            raise refusal(what, target.given, "is not writable")
    elif target.kind == MISSING:
        _check_creatable(what, target.given, target.real.parent)
    else:
        directory = target.real.parent
        if not _can_create_in(directory):
            raise refusal(what, target.given, f"cannot be replaced: its directory {directory} is not writable")
        _check_appendable(what, target.given, target.real)
    return target


def check_directory(what: str, path: Path) -> None:
    """A directory reports go into: an existing writable directory, or one we could create."""
    from kvdoctor.report.target import os_error, refusal

    try:
        is_dir = path.is_dir()
    except OSError as exc:  # Python < 3.12 raises on a symlink loop
        raise os_error(path, what, exc) from None
    if is_dir:
        if not _can_create_in(path):
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
    if not _can_create_in(ancestor):
        raise refusal(what, given, f"cannot be created: {ancestor} is not writable")


def _can_create_in(directory: Path) -> bool:
    """Whether this process can create a file in DIRECTORY, proven by creating one of its own there and removing
    it (``os.access`` says yes to root for ``/proc``, and answers with the permitted capabilities, not the
    effective ones). The name is new (``O_EXCL``), so no file of anyone else's is touched; a SIGTERM while it
    exists unwinds through the removal (``kvdoctor.report.atomic.unwind_on_sigterm``)."""
    from kvdoctor.report.atomic import unwind_on_sigterm

    with unwind_on_sigterm():
        try:
            fd, probe = tempfile.mkstemp(dir=directory, prefix=PROBE_PREFIX, suffix=".tmp")
        except OSError:
            return False
        try:
            os.close(fd)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(probe)
    return True


def _check_appendable(what: str, given: Path, real: Path) -> None:
    """An existing file this process may write, proven by opening it for appending and closing it unwritten
    (``open`` checks the effective credentials; nothing is truncated, written or created)."""
    from kvdoctor.report.target import refusal

    flags = os.O_WRONLY | os.O_APPEND | os.O_NOCTTY | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(real, flags)
    except OSError as exc:
        raise refusal(what, given, f"is not writable ({exc.strerror or exc})") from None
    os.close(fd)
