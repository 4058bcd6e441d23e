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


# ---- standard output and standard error that cannot take the report (kvdoctor/cli/streams.py) ----

GREEN_INSPECT = ["inspect", "inkling-small"]
LOST = "kvdoctor: error: cannot write the report to standard output: "
# One output path for every command: the console-script entry guards the streams, not each command.
PRINTERS = {
    "inspect --json": [*GREEN_INSPECT, "--json"],
    "inspect tables": GREEN_INSPECT,
    "inspect --server vllm": ["inspect", "qwen3-8b", "--server", "vllm"],
    "schema": ["schema", "inspect"],
    "--version": ["--version"],
    "-h": ["inspect", "-h"],
}


def spawn(
    args: list[str], *, stdout: int, stderr: int = subprocess.PIPE, env: dict[str, str] | None = None, **kw: object
) -> subprocess.CompletedProcess[bytes]:
    """The real CLI with the given descriptors (bytes: an encoding problem must show, not be decoded away)."""
    base = {k: v for k, v in os.environ.items() if k not in ("GITHUB_STEP_SUMMARY", "GITHUB_ACTIONS")}
    return subprocess.run(
        [sys.executable, "-m", "kvdoctor", *args],
        stdout=stdout,
        stderr=stderr,
        env={**base, **(env or {})},
        timeout=300,
        check=False,
        **kw,  # type: ignore[arg-type]
    )


def readerless_pipe() -> int:
    """The write end of a pipe whose reader is already gone: the first write is EPIPE, by construction."""
    read, write = os.pipe()
    os.close(read)
    return write


def error_cases(junit_path: Path) -> list[str]:
    from junitparser import Error, JUnitXml

    cases = [case for suite in JUnitXml.fromfile(str(junit_path)) for case in suite]
    assert len(cases) == 1, [c.name for c in cases]
    assert isinstance(cases[0].result[0], Error)
    return [cases[0].result[0].message]


@pytest.mark.parametrize("name", sorted(PRINTERS))
def test_a_closed_stdout_is_exit_2_and_one_line(name: str) -> None:
    """Before: exit 0 and nothing anywhere (sys.stdout is None, every write vanished)."""
    out = spawn(PRINTERS[name], stdout=subprocess.DEVNULL, preexec_fn=lambda: os.close(1))
    assert out.returncode == 2, out.stderr
    assert out.stderr.decode() == f"{LOST}it was closed before kvdoctor started\n"


@pytest.mark.parametrize("name", sorted(PRINTERS))
def test_a_full_disk_on_stdout_is_exit_2_not_a_kvdoctor_bug(name: str) -> None:
    """Before: ``--json >/dev/full`` was exit 4, "internal error: OSError" (a kvdoctor bug)."""
    with open("/dev/full", "wb") as full:
        out = spawn(PRINTERS[name], stdout=full.fileno())
    assert out.returncode == 2, out.stderr
    assert out.stderr.decode() == f"{LOST}No space left on device\n"


@pytest.mark.parametrize("name", sorted(PRINTERS))
def test_a_reader_that_went_away_is_a_quiet_141(name: str) -> None:
    """Before: ``| head -c0`` was exit 1 (reads as "gate failed") with nothing said. Now 141, what a shell
    reports for a process SIGPIPE killed, and no traceback nor "Exception ignored" from the last flush."""
    write = readerless_pipe()
    try:
        out = spawn(PRINTERS[name], stdout=write)
    finally:
        os.close(write)
    assert out.returncode == 141
    assert out.stderr == b""


@pytest.mark.parametrize(
    ("stdout", "expected"), [("full", f"{LOST}No space left on device"), ("gone", None), ("closed", LOST)]
)
def test_output_lost_replaces_an_earlier_green_junit_with_an_error(tmp_path: Path, stdout: str, expected: str) -> None:
    """inspect renders, then publishes: output lost in between must not leave the earlier pass behind."""
    from kvdoctor.report import junit

    report = tmp_path / "r.xml"
    junit.write(report, "kvdoctor.inspect", [junit.Case("no-error-hazards", junit.PASSED)])  # "the earlier run"
    summary = tmp_path / "summary.md"
    env = {"GITHUB_STEP_SUMMARY": str(summary)}
    args = [*GREEN_INSPECT, "--junit", str(report)]
    if stdout == "full":
        with open("/dev/full", "wb") as full:
            out = spawn(args, stdout=full.fileno(), env=env)
    elif stdout == "gone":
        write = readerless_pipe()
        try:
            out = spawn(args, stdout=write, env=env)
        finally:
            os.close(write)
    else:
        out = spawn(args, stdout=subprocess.DEVNULL, env=env, preexec_fn=lambda: os.close(1))
    assert out.returncode == (141 if stdout == "gone" else 2), out.stderr
    (message,) = error_cases(report)
    assert ("standard output" in message) and ("EPIPE" in message if stdout == "gone" else True)
    if expected is not None:
        assert out.stderr.decode().startswith(expected) and out.stderr.count(b"\n") == 1
    assert "**ERROR**" in summary.read_text() and "**passed**" not in summary.read_text()


def test_a_closed_stderr_never_crashes_nor_leaks_onto_stdout() -> None:
    green = spawn(GREEN_INSPECT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, preexec_fn=lambda: os.close(2))
    assert green.returncode == 0 and green.stdout.decode().splitlines()[-1].startswith("verdict: passed")
    bad = spawn(["inspect", "no-such-model-xyz"], stdout=subprocess.PIPE, preexec_fn=lambda: os.close(2))
    assert bad.returncode == 2 and bad.stdout == b""  # print(file=None) would have written the error to stdout


def test_a_stderr_without_reader_keeps_the_exit_code() -> None:
    write = readerless_pipe()
    try:
        bad = spawn(["inspect", "no-such-model-xyz"], stdout=subprocess.PIPE, stderr=write)
        green = spawn(GREEN_INSPECT, stdout=subprocess.PIPE, stderr=write)
    finally:
        os.close(write)
    assert bad.returncode == 2 and bad.stdout == b""
    assert green.returncode == 0 and b"verdict: passed" in green.stdout


# ---- a locale that cannot carry the output's characters ----

C_LOCALE = {"LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}
LOCALES = {"C": C_LOCALE, "latin-1": {"PYTHONIOENCODING": "latin-1"}}


@pytest.mark.parametrize("locale", sorted(LOCALES))
def test_a_green_run_under_an_ascii_locale_degrades_its_characters(locale: str) -> None:
    """Before: exit 4, UnicodeEncodeError on the verdict line's dash."""
    out = spawn([*GREEN_INSPECT, "--page-size", "128"], stdout=subprocess.PIPE, env=LOCALES[locale])
    assert out.returncode == 0, out.stderr
    text = out.stdout.decode("ascii")  # every byte ASCII: dashes, boxes, arrows spelled out
    assert text.splitlines()[-1] == "verdict: passed - no error hazards"
    assert "+---" in text and "|" in text  # rich's tables drawn in ASCII, not dropped


@pytest.mark.parametrize("locale", sorted(LOCALES))
def test_json_under_an_ascii_locale_is_the_same_valid_json(locale: str) -> None:
    import json

    args = [*GREEN_INSPECT, "--json"]
    plain = json.loads(spawn(args, stdout=subprocess.PIPE).stdout)
    degraded = json.loads(spawn(args, stdout=subprocess.PIPE, env=LOCALES[locale]).stdout.decode("ascii"))
    for doc in (plain, degraded):
        doc.pop("timestamp")
    assert degraded == plain  # escapes, never replacements: the values are the same strings


@pytest.mark.parametrize("locale", sorted(LOCALES))
def test_a_red_strict_run_under_an_ascii_locale_is_still_exit_1(locale: str) -> None:
    out = spawn(RED_INSPECT, stdout=subprocess.PIPE, env=LOCALES[locale])
    assert out.returncode == 1, out.stderr
    assert out.stdout.decode("ascii").splitlines()[-1].startswith("verdict: FAILED - ")


def test_an_error_line_under_an_ascii_locale_is_one_ascii_line(tmp_path: Path) -> None:
    """A long outside value is cut with "…" (kvdoctor.text.shown): spelled "..." where ASCII is all there is."""
    out = spawn(["inspect", str(tmp_path / ("é" * 300))], stdout=subprocess.PIPE, env=C_LOCALE)
    assert out.returncode == 2
    line = out.stderr.decode("ascii")
    assert line.startswith("kvdoctor: error: ") and line.count("\n") == 1 and "Traceback" not in line


def test_roundtrip_tables_under_an_ascii_locale() -> None:
    out = spawn(
        ["roundtrip", "inkling-small", "--device", "cpu", "--requests", "2", "--tokens", "8"],
        stdout=subprocess.PIPE,
        env=C_LOCALE,
    )
    assert out.returncode == 0, out.stderr
    last = out.stdout.decode("ascii").splitlines()[-1]
    assert last.startswith("verdict: passed - ") and "components equal" in last
