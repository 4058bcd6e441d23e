"""The report-path preflight proves a path writable instead of asking ``os.access`` (issue 28, defect 10).

``os.access`` answers for the real uid with the *permitted* capabilities: to root it says yes for ``/proc``
(where no file can be created), and in a process whose effective ``CAP_DAC_OVERRIDE`` was dropped (a sandbox,
a CI runner) it says yes for a ``chmod 444`` file and a ``chmod 555`` directory that the write at the end then
fails on: exit 2 "cannot write a report" after the work, masking the verdict (and SIGTERM's 143). CI runs as
root, so the cases are checked as root: ``/proc`` as it is, the read-only file and directory in a child that
drops its effective ``CAP_DAC_OVERRIDE`` (``capset``) and keeps it permitted, exactly what fools ``access``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvdoctor._exceptions import InputError
from kvdoctor.report import atomic, preflight

ROOT = Path(__file__).resolve().parents[2]
CAP_DAC_OVERRIDE = 1
GREEN_INSPECT = ["inspect", "inkling-small"]  # a run whose tables would print if the work started

# Python run first in a child: clear CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the effective set only.
DROP_DAC = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
class Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
class Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]
header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3, this thread
assert libc.capget(ctypes.byref(header), data) == 0
data[0].effective &= ~((1 << 1) | (1 << 2))
assert libc.capset(ctypes.byref(header), data) == 0, ctypes.get_errno()
"""


def effective_caps() -> int:
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("CapEff:"))
    return int(line.split()[1], 16)


as_root = pytest.mark.skipif(
    os.geteuid() != 0 or not effective_caps() & (1 << CAP_DAC_OVERRIDE),
    reason="needs root with CAP_DAC_OVERRIDE (what CI runs as)",
)


def listing(directory: Path) -> dict[str, object]:
    """Every file's size, mtime and mode, and every directory's entries: what the preflight must leave as it was
    (a directory's own mtime moves when the probe is created and removed; nothing in it does)."""
    return {
        p.name: listing(p) if p.is_dir() else (p.lstat().st_size, p.lstat().st_mtime_ns, p.lstat().st_mode)
        for p in directory.iterdir()
    }


@pytest.fixture
def read_only(tmp_path: Path) -> tuple[Path, Path]:
    """A ``chmod 444`` file holding someone's content, and a ``chmod 555`` directory."""
    file, directory = tmp_path / "r444.xml", tmp_path / "d555"
    file.write_text("someone else's report")
    file.chmod(0o444)
    directory.mkdir()
    directory.chmod(0o555)
    yield file, directory
    directory.chmod(0o755)


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("GITHUB_STEP_SUMMARY", "GITHUB_ACTIONS")}


def in_child_without_dac(code: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", DROP_DAC + code, *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=clean_env(),
        check=False,
    )


def test_proc_is_refused_by_the_preflight() -> None:
    """Before: ``os.access('/proc', W_OK)`` is True for root, so /proc/x.xml passed and the write failed later."""
    with pytest.raises(InputError, match=r"--junit /proc/x\.xml cannot be created: /proc is not writable"):
        preflight.check_file("--junit", Path("/proc/x.xml"))
    with pytest.raises(InputError, match=r"cannot write a report: --output-dir /proc/kvdoctor-out"):
        preflight.check_directory("--output-dir", Path("/proc/kvdoctor-out"))
    with pytest.raises(OSError):  # what the preflight stands in for: the write itself fails there
        atomic.write_text(Path("/proc/x.xml"), "x", what="--junit")


def test_a_junit_under_proc_is_exit_2_before_any_work() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "kvdoctor", *GREEN_INSPECT, "--junit", "/proc/x.xml"],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(),
        check=False,
    )
    assert out.returncode == 2
    assert out.stdout == ""  # no table: the work never started (before: the tables, then exit 2)
    assert out.stderr.count("\n") == 1 and "/proc/x.xml cannot be created: /proc is not writable" in out.stderr


@as_root
def test_root_may_write_a_read_only_file_and_directory_and_the_write_agrees(read_only: tuple[Path, Path]) -> None:
    """With its capabilities, root writes a 444 file or into a 555 directory (as ``echo >`` would): the
    preflight accepts them, and the write at the end does succeed, so the two never disagree."""
    file, directory = read_only
    before = listing(file.parent)
    preflight.check_file("--junit", file)
    preflight.check_file("--junit", directory / "j.xml")
    preflight.check_directory("--output-dir", directory)
    assert listing(file.parent) == before and list(directory.iterdir()) == []  # the probe left nothing
    assert file.read_text() == "someone else's report"  # opened to prove it, never written
    atomic.write_text(file, "<testsuites/>")
    atomic.write_text(directory / "j.xml", "<testsuites/>")
    assert file.read_text() == (directory / "j.xml").read_text() == "<testsuites/>"


CHECKS = """
import sys
from pathlib import Path
from kvdoctor._exceptions import InputError
from kvdoctor.report import preflight
what, path = sys.argv[1], Path(sys.argv[2])
try:
    preflight.check_directory(what, path) if what == "--output-dir" else preflight.check_file(what, path)
except InputError as exc:
    print(exc)
    sys.exit(2)
"""


@as_root
@pytest.mark.parametrize(
    ("case", "what", "words"),
    [
        ("file-444", "--junit", "is not writable (Permission denied)"),
        ("dir-555", "--junit", "cannot be created: {dir} is not writable"),
        ("dir-555", "--output-dir", "is not a writable directory"),
        ("summary-444", "$GITHUB_STEP_SUMMARY", "is not writable (Permission denied)"),
    ],
)
def test_without_dac_override_access_lies_and_the_preflight_does_not(
    read_only: tuple[Path, Path], case: str, what: str, words: str
) -> None:
    """Before: ``os.access`` (the permitted set) said yes, the preflight passed, the write failed at the end."""
    file, directory = read_only
    path = file if case.endswith("444") else directory if what == "--output-dir" else directory / "j.xml"
    before = listing(file.parent)
    told = in_child_without_dac(
        "import os, sys\n"
        "print(os.access(sys.argv[2], os.W_OK) or os.access(os.path.dirname(sys.argv[2]), os.W_OK))\n" + CHECKS,
        what,
        str(path),
    )
    assert told.stdout.startswith("True\n"), told.stdout + told.stderr  # what fooled the old preflight
    assert told.returncode == 2, told.stdout + told.stderr
    assert words.format(dir=directory) in told.stdout
    assert listing(file.parent) == before and list(directory.iterdir()) == []
    assert file.read_text() == "someone else's report"


@as_root
def test_without_dac_override_a_read_only_junit_directory_is_exit_2_before_any_work(
    read_only: tuple[Path, Path],
) -> None:
    """The whole command: refused in one line before the work (before: the tables, then exit 2 at the end)."""
    _, directory = read_only
    out = in_child_without_dac(
        "import sys\nsys.argv[0] = 'kvdoctor'\nfrom kvdoctor.cli.app import main\nmain()\n",
        *GREEN_INSPECT,
        "--junit",
        str(directory / "j.xml"),
    )
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1 and f"cannot be created: {directory} is not writable" in out.stderr
    assert list(directory.iterdir()) == []
