"""Report paths that are not plain files: devices, FIFOs, symlinks, /proc fd links, loops, and the
preflight that refuses what could not be written, before any work.

Every test checks that nothing was lost: the device stays a device, the link stays a link (its
target gets the content), no temp file is left next to the target.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvdoctor._exceptions import InputError
from kvdoctor.report import atomic, github, preflight, target

ROOT = Path(__file__).resolve().parents[2]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a character device needs root")


def null_device(path: Path) -> Path:
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a second /dev/null
    return path


def assert_still_null(path: Path) -> None:
    st = os.lstat(path)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)


def no_temp_files(directory: Path) -> bool:
    return not list(directory.glob(".*.tmp"))


@needs_root
def test_a_character_device_is_written_through_never_replaced(tmp_path: Path) -> None:
    dev = null_device(tmp_path / "null")
    atomic.write_text(dev, "<testsuites/>")
    with atomic.atomic_open(dev, "wb") as fh:
        fh.write(b"parquet bytes")
    github.append_step_summary("### summary\n", env={"GITHUB_STEP_SUMMARY": str(dev)})
    assert_still_null(dev)
    assert no_temp_files(tmp_path)


@needs_root
def test_a_symlink_to_a_device_stays_a_symlink_to_a_device(tmp_path: Path) -> None:
    dev = null_device(tmp_path / "null")
    link = tmp_path / "junit.xml"
    link.symlink_to(dev)
    atomic.write_text(link, "<testsuites/>")
    assert link.is_symlink() and os.readlink(link) == str(dev)
    assert_still_null(dev)


def test_a_symlink_keeps_its_link_and_its_target_gets_the_content(tmp_path: Path) -> None:
    real = tmp_path / "reports" / "junit.xml"
    real.parent.mkdir()
    real.write_text("old")
    os.chmod(real, 0o640)
    link = tmp_path / "junit.xml"
    link.symlink_to(Path("reports") / "junit.xml")  # relative, as users make them
    atomic.write_text(link, "new")
    assert link.is_symlink() and os.readlink(link) == "reports/junit.xml"
    assert real.read_text() == "new"
    assert stat.S_IMODE(real.stat().st_mode) == 0o640  # the replaced file keeps its mode, like open()
    assert no_temp_files(real.parent) and no_temp_files(tmp_path)


def test_a_dangling_symlink_creates_its_target_and_stays_a_link(tmp_path: Path) -> None:
    link = tmp_path / "summary.md"
    link.symlink_to(tmp_path / "made-later.md")
    github.append_step_summary("### one\n", env={"GITHUB_STEP_SUMMARY": str(link)})
    atomic.write_text(tmp_path / "j.xml", "x")
    assert link.is_symlink() and (tmp_path / "made-later.md").read_text() == "### one\n"


@pytest.mark.parametrize(
    ("make", "words"),
    [
        ("loop", "symlink loop"),
        ("loop-parent", "symlink loop"),
        ("dangling-dir", "does not exist"),
        ("dangling-parent", "dangling symlink"),
        ("under-file", "is not a directory"),
        ("directory", "is a directory"),
    ],
)
def test_unusable_paths_are_one_precise_line(tmp_path: Path, make: str, words: str) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    path = a
    if make == "loop":
        a.symlink_to(b)
        b.symlink_to(a)
    elif make == "loop-parent":
        a.symlink_to(b)
        b.symlink_to(a)
        path = a / "junit.xml"
    elif make == "dangling-dir":
        a.symlink_to(tmp_path / "missing" / "junit.xml")
    elif make == "dangling-parent":
        a.symlink_to(tmp_path / "missing")
        path = a / "junit.xml"
    elif make == "under-file":
        a.write_text("a file")
        path = a / "deeper" / "junit.xml"
    else:
        a.mkdir()
    before = {p.name: os.readlink(p) if p.is_symlink() else None for p in tmp_path.iterdir()}
    for attempt in (
        lambda: preflight.check_file("--junit", path),
        lambda: atomic.write_text(path, "x", what="--junit"),
    ):
        with pytest.raises(InputError) as caught:
            attempt()
        message = str(caught.value)
        assert "\n" not in message and words in message and message.startswith("cannot write a report: --junit")
    assert {p.name: os.readlink(p) if p.is_symlink() else None for p in tmp_path.iterdir()} == before


@contextlib.contextmanager
def fifo(path: Path) -> Iterator[Path]:
    os.mkfifo(path)
    yield path


def test_a_fifo_without_reader_is_refused_not_waited_on(tmp_path: Path) -> None:
    with fifo(tmp_path / "pipe") as pipe:
        started = time.monotonic()
        with pytest.raises(InputError, match="is a FIFO with no reader"):
            preflight.check_file("--junit", pipe)
        with pytest.raises(InputError, match="is a FIFO with no reader"):
            atomic.write_text(pipe, "x", what="--junit")
        assert time.monotonic() - started < 5
        assert stat.S_ISFIFO(os.lstat(pipe).st_mode)


def test_a_fifo_with_a_reader_gets_the_whole_report_once(tmp_path: Path) -> None:
    with fifo(tmp_path / "pipe") as pipe:
        reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)  # a reader is there before we look
        try:
            preflight.check_file("--junit", pipe)  # holds the FIFO open: no early end of file
            with pytest.raises(BlockingIOError):
                os.read(reader, 100)  # a writer is there and has not written yet (EOF would be b"")
            atomic.write_text(pipe, "<testsuites/>")
            assert os.read(reader, 100) == b"<testsuites/>"
            assert os.read(reader, 100) == b""  # our end is closed: end of file
        finally:
            os.close(reader)
        assert stat.S_ISFIFO(os.lstat(pipe).st_mode) and no_temp_files(tmp_path)


def test_an_open_file_behind_proc_fd_is_written_through(tmp_path: Path) -> None:
    """``--junit /dev/stdout`` with stdout redirected to a file: append to that file (same inode)."""
    out = tmp_path / "stdout.txt"
    with out.open("w") as fh:
        fh.write("earlier output\n")
        fh.flush()
        inode = os.fstat(fh.fileno()).st_ino
        resolved = target.resolve(Path(f"/dev/fd/{fh.fileno()}"), "--junit")
        assert resolved.through
        atomic.write_text(Path(f"/dev/fd/{fh.fileno()}"), "<testsuites/>")
    assert out.read_text() == "earlier output\n<testsuites/>" and out.stat().st_ino == inode
    read, write = os.pipe()
    try:
        atomic.write_text(Path(f"/proc/self/fd/{write}"), "through a pipe")
        assert os.read(read, 100) == b"through a pipe"
    finally:
        os.close(read)
        os.close(write)


def test_preflight_checks_every_output_and_creates_nothing(tmp_path: Path) -> None:
    env = {"GITHUB_STEP_SUMMARY": str(tmp_path / "summary-dir")}
    (tmp_path / "summary-dir").mkdir()
    with pytest.raises(InputError, match=r"\$GITHUB_STEP_SUMMARY .* is a directory"):
        preflight.check_outputs(junit_path=tmp_path / "new" / "j.xml", output_dir=tmp_path / "out", env=env)
    preflight.check_outputs(junit_path=tmp_path / "new" / "j.xml", output_dir=tmp_path / "out", env={})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary-dir"]


# A process that holds a report's temp file open when SIGTERM arrives (argv[2]: "off" switches the
# cleanup off, to prove it is what removes the file).
WRITER = (
    "import contextlib, pathlib, sys, time\n"
    "from kvdoctor.report import atomic\n"
    "if sys.argv[2] == 'off':\n"
    "    atomic.unwind_on_sigterm = contextlib.nullcontext\n"
    "target = pathlib.Path(sys.argv[1])\n"
    "with atomic.atomic_open(target) as fh:\n"
    "    fh.write('half of a report')\n"
    "    fh.flush()\n"
    "    (target.parent / 'ready').write_text('')\n"
    "    time.sleep(3600)\n"
)


@pytest.mark.parametrize("cleanup", ["on", "off"])
def test_sigterm_mid_write_removes_the_temp_file(tmp_path: Path, cleanup: str) -> None:
    target_path = tmp_path / "result.json"
    target_path.write_text("the previous report")
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target_path), cleanup], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "ready").exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert target_path.read_text() == "the previous report"  # old or new, never half
    if cleanup == "off":
        assert code == -signal.SIGTERM and not no_temp_files(tmp_path)
        return
    assert code == 128 + signal.SIGTERM and no_temp_files(tmp_path)
