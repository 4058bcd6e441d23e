"""Report outputs under hostile paths, through the real commands (``inspect``, ``roundtrip``,
``pd-eval``): devices stay devices, links stay links, FIFOs without a reader and loops are one
line and exit 2, and an unwritable output is refused before any work so a red verdict (exit 1)
can never come back as exit 2 after the run.

Every test asserts its exact exit code and that nothing was lost.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvdoctor.cli.app import app
from kvdoctor.report import preflight
from tests.pd.conftest import no_leftovers  # noqa: F401  (the pd tests' orphan check)
from tests.pd.helpers import invoke, pd_args

INKLING = ["inkling-small", "--kv-cache-dtype", "mxfp8", "--disaggregation-mode", "decode", "--page-size", "128"]
RED_INSPECT = ["inspect", *INKLING, "--disaggregation-decode-retraction-backup", "host_pool", "--strict"]
RED_ROUNDTRIP = [
    "roundtrip",
    *INKLING,
    "--device",
    "cpu",
    "--requests",
    "4",
    "--tokens",
    "64",
    "--inject",
    "missing-mamba",
]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a character device needs root")


def kvdoctor(*args: str, summary: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_STEP_SUMMARY", "GITHUB_ACTIONS")}
    if summary is not None:
        env["GITHUB_STEP_SUMMARY"] = str(summary)
    return subprocess.run(
        [sys.executable, "-m", "kvdoctor", *args], capture_output=True, text=True, timeout=300, check=False, env=env
    )


def null_device(path: Path) -> Path:
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return path


def is_null_device(path: Path) -> bool:
    st = os.lstat(path)
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)


def summary_link(tmp_path: Path) -> tuple[Path, Path]:
    """A step-summary path that is a symlink to a file with earlier content."""
    real = tmp_path / "real-summary.md"
    real.write_text("earlier step\n")
    link = tmp_path / "summary.md"
    link.symlink_to(real)
    return link, real


@needs_root
@pytest.mark.parametrize(("command", "code"), [(RED_INSPECT, 1), (RED_ROUNDTRIP, 1)])
def test_junit_to_a_device_and_summary_through_a_symlink(tmp_path: Path, command: list[str], code: int) -> None:
    dev = null_device(tmp_path / "null")
    link, real = summary_link(tmp_path)
    out = kvdoctor(*command, "--junit", str(dev), summary=link)
    assert out.returncode == code, out.stderr
    assert is_null_device(dev)  # not replaced by a regular file
    assert link.is_symlink() and os.readlink(link) == str(real)
    text = real.read_text()
    assert text.startswith("earlier step\n") and "**FAILED**" in text
    assert not list(tmp_path.glob(".*.tmp"))


@needs_root
@pytest.mark.usefixtures("no_leftovers")
def test_pd_eval_reports_to_a_device_and_through_symlinks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dev = null_device(tmp_path / "null")
    link, real = summary_link(tmp_path)
    junit_real = tmp_path / "reports" / "junit.xml"
    junit_real.parent.mkdir()
    junit_link = tmp_path / "junit.xml"
    junit_link.symlink_to(junit_real)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(link))
    run = invoke(pd_args(tmp_path / "out", "--junit", str(dev)))
    assert run.exit_code == 0, run.output
    assert is_null_device(dev)
    assert "### kvdoctor pd-eval" in real.read_text() and link.is_symlink()
    run = invoke(pd_args(tmp_path / "out2", "--junit", str(junit_link)))
    assert run.exit_code == 0, run.output
    assert junit_link.is_symlink() and "<testsuite" in junit_real.read_text()
    assert real.read_text().count("### kvdoctor pd-eval") == 2  # appended, never replaced


def test_a_fifo_without_reader_is_exit_2_at_once(tmp_path: Path) -> None:
    pipe = tmp_path / "junit.fifo"
    os.mkfifo(pipe)
    started = time.monotonic()
    out = kvdoctor(*RED_INSPECT, "--junit", str(pipe))
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "is a FIFO with no reader" in out.stderr
    assert out.stdout == ""  # refused before any work
    assert time.monotonic() - started < 60 and stat.S_ISFIFO(os.lstat(pipe).st_mode)


@pytest.mark.usefixtures("no_leftovers")
def test_pd_eval_refuses_a_readerless_fifo_summary_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipe = tmp_path / "summary.fifo"
    os.mkfifo(pipe)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pipe))
    run = invoke(pd_args(tmp_path / "out"))
    assert run.exit_code == 2, run.output
    assert run.stderr.count("\n") == 1 and "$GITHUB_STEP_SUMMARY" in run.stderr and "no reader" in run.stderr
    assert not (tmp_path / "out").exists() and stat.S_ISFIFO(os.lstat(pipe).st_mode)


@pytest.mark.parametrize("layout", ["loop", "dangling"])
def test_loops_and_dangling_links_are_one_precise_line(tmp_path: Path, layout: str) -> None:
    a, b = tmp_path / "a.xml", tmp_path / "b.xml"
    if layout == "loop":
        a.symlink_to(b)
        b.symlink_to(a)
        expected = "symlink loop"
    else:
        a.symlink_to(tmp_path / "no-such-dir" / "junit.xml")
        expected = "whose directory"
    out = kvdoctor(*RED_ROUNDTRIP, "--junit", str(a))
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and expected in out.stderr and "No such file" not in out.stderr
    assert out.stdout == "" and a.is_symlink() and not (tmp_path / "no-such-dir").exists()


@pytest.mark.parametrize("command", [RED_INSPECT, RED_ROUNDTRIP], ids=["inspect", "roundtrip"])
def test_an_unwritable_junit_is_refused_before_any_work(tmp_path: Path, command: list[str]) -> None:
    """Both commands' verdicts would be red (exit 1); the unusable --junit is found first."""
    out = kvdoctor(*command, "--junit", str(tmp_path))  # a directory
    assert out.returncode == 2
    assert out.stdout == "" and out.stderr.count("\n") == 1 and "is a directory" in out.stderr


def test_without_the_preflight_the_work_is_done_before_the_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Teeth: without the preflight, inspect renders its red verdict and only then fails on --junit."""
    monkeypatch.setattr(preflight, "check_outputs", lambda **_: None)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    run = CliRunner().invoke(app, [*RED_INSPECT, "--junit", str(tmp_path)], catch_exceptions=False)
    assert run.exit_code == 2 and "KVD001" in run.stdout  # the work happened; its verdict is lost
