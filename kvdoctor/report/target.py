"""Where a report path really leads, decided before a byte is written.

Why: an atomic write renames a temp file over its target. That is right for a regular file (readers
see the old report or the new, never half) and destructive for anything else: run as root,
``--junit /dev/null`` would turn /dev/null into a regular file, and a symlinked report would lose its
link. So every report path is classified first:

- a regular file, or nothing yet: replaced atomically (a symlink is followed to its final target,
  and that target is what gets replaced; the link itself stays a link);
- a character device or a FIFO: written *through* (opened for writing; never renamed over). A FIFO
  with no reader is refused instead of blocking forever;
- a symlink into ``/proc/<pid>/fd`` (``/dev/stdout``, ``/dev/fd/3``): always written through, since
  renaming over the file it shows would detach it from whoever holds it open;
- a directory, block device, socket, symlink loop, dangling symlink into a missing directory, or a
  path under a non-directory: refused with one precise line (``InputError``, exit 2).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from kvdoctor._exceptions import InputError
from kvdoctor.core.record import record

MAX_SYMLINKS = 40  # Linux's own limit before ELOOP
REGULAR, MISSING, CHAR_DEVICE, FIFO = "regular file", "missing", "character device", "FIFO"
_REFUSED = {
    stat.S_IFDIR: "is a directory",
    stat.S_IFBLK: "is a block device (kvdoctor never writes a report over a disk)",
    stat.S_IFSOCK: "is a socket",
}


@record(frozen=True)
class Target:
    """One report path, resolved.

    ``real`` is the file a rename would replace (every symlink followed); ``through`` says the
    file must instead be opened and written in place; ``kind`` is one of the module's kinds.
    """

    given: Path
    real: Path
    kind: str
    through: bool

    @property
    def exists(self) -> bool:
        return self.kind != MISSING


def resolve(path: Path, what: str) -> Target:
    """Classify ``path`` (a report file) or raise a one-line ``InputError`` naming ``what``."""
    given = Path(path)
    real, magic = _follow(given, what)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        _check_missing(given, real, what)
        return Target(given, real, MISSING, through=False)
    except OSError as exc:
        raise os_error(given, what, exc) from None
    kind = stat.S_IFMT(st.st_mode)
    if kind in _REFUSED:
        raise refusal(what, given, _REFUSED[kind], real)
    if stat.S_ISREG(st.st_mode):
        return Target(given, real, REGULAR, through=magic)
    if stat.S_ISCHR(st.st_mode):
        return Target(given, real, CHAR_DEVICE, through=True)
    if stat.S_ISFIFO(st.st_mode):
        return Target(given, real, FIFO, through=True)
    raise refusal(what, given, "is not a regular file, character device or FIFO", real)


def refusal(what: str, given: Path, reason: str, real: Path | None = None) -> InputError:
    """The one line every refused report path gets (it starts like every report-write error)."""
    via = f" (via symlink to {real})" if real is not None and real != given and _is_link(given) else ""
    label = f"{what} {given}" if what else str(given)
    return InputError(f"cannot write a report: {label}{via} {reason}")


def _follow(given: Path, what: str) -> tuple[Path, bool]:
    """The final target of ``given`` (parents resolved, the last component's links followed one by
    one so that a loop is seen), and whether it is an open file's ``/proc/<pid>/fd`` entry."""
    current = Path(os.path.abspath(given))
    for _ in range(MAX_SYMLINKS):
        try:
            parent = Path(os.path.realpath(current.parent, strict=True))
        except FileNotFoundError:
            return current, False  # a missing parent: _check_missing names it
        except OSError as exc:
            raise os_error(given, what, exc) from None
        current = parent / current.name
        if _in_proc(parent):
            return current, True  # an open file's link: stat() follows it, readlink() cannot
        if not _is_link(current):
            return current, False
        current = Path(os.path.normpath(parent / os.readlink(current)))
    raise refusal(what, given, "is a symlink loop (more than 40 links in a row)")


def _check_missing(given: Path, real: Path, what: str) -> None:
    """A report that does not exist yet: its directory must exist, or be creatable by us."""
    if real != Path(os.path.abspath(given)) and _is_link(given):
        if not real.parent.is_dir():
            raise refusal(
                what, given, f"is a dangling symlink to {real}, whose directory {real.parent} does not exist", real
            )
        return
    ancestor = real.parent
    while not os.path.lexists(ancestor) and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if _is_link(ancestor) and not ancestor.exists():
        raise refusal(what, given, f"cannot be created: {ancestor} is a dangling symlink (to {os.readlink(ancestor)})")
    if not ancestor.is_dir():
        raise refusal(what, given, f"cannot be created: {ancestor} is not a directory")


def os_error(given: Path, what: str, exc: OSError) -> InputError:
    """The one-line refusal for an OSError met while reaching an output path."""
    if exc.errno == errno.ELOOP:
        return refusal(what, given, "runs into a symlink loop")
    if exc.errno == errno.ENOTDIR:
        return refusal(what, given, f"cannot be reached: {first_non_directory(given)} is not a directory")
    if exc.errno == errno.EACCES:
        return refusal(what, given, "cannot be reached: permission denied on one of its directories")
    return refusal(what, given, f"cannot be reached: {exc.strerror or exc}")


def first_non_directory(path: Path) -> Path:
    """The first component of ``path`` that exists but is not a directory (what ENOTDIR means)."""
    absolute = Path(os.path.abspath(path))
    for ancestor in reversed(absolute.parents):
        if os.path.lexists(ancestor) and not ancestor.is_dir():
            return ancestor
    return absolute.parent


def _in_proc(directory: Path) -> bool:
    """``/proc/<pid>/fd`` (or ``/proc/self/fd``): its entries are open files, not names to rename."""
    parts = directory.parts
    return len(parts) >= 3 and parts[1] == "proc"


def _is_link(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False
