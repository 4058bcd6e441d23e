"""Shared helpers of the pd-eval tests: stand-in commands, knobs, CLI invocation."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
from click.testing import Result
from typer.testing import CliRunner

from kvdoctor.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
STANDINS = ROOT / "tests" / "pd" / "standins"
GSM8K = ROOT / "fixtures" / "gsm8k" / "test.jsonl"
SERVER = f"{sys.executable} {STANDINS / 'server.py'}"
ROUTER = f"{sys.executable} {STANDINS / 'router.py'}"
KNOB = "KVDOCTOR_STANDIN_"
# The kvdoctor CLI as a separate process (for tests that send it signals).
KVDOCTOR = [sys.executable, "-c", "from kvdoctor.cli.app import main; main()"]
# The ``deploy`` fixture (conftest): start a stand-in decode + router outside kvdoctor; their URLs by role.
Deploy = Callable[..., dict[str, str]]


def pd_args(out: Path, *extra: str) -> list[str]:
    """A fast pd-eval against the stand-ins: 5 shots, 24 questions, 8 in flight."""
    return [
        "pd-eval",
        "stand-in/model",
        "--data-path",
        str(GSM8K),
        "--launcher",
        SERVER,
        "--router-launcher",
        ROUTER,
        "--output-dir",
        str(out),
        "--num-shots",
        "5",
        "--num-questions",
        "24",
        "--parallel",
        "8",
        "--timeout",
        "60",
        *extra,
    ]


def run_dir(out: Path) -> Path:
    """The one run directory a pd-eval created under ``--output-dir`` ``out``."""
    runs = sorted(out.glob("run-*"))
    assert len(runs) == 1, f"expected one run directory in {out}, found {[r.name for r in runs]}"
    return runs[0]


def result_json(out: Path) -> dict[str, object]:
    """``result.json`` of the one run under ``out``."""
    data: dict[str, object] = json.loads((run_dir(out) / "result.json").read_text())
    return data


def invoke(args: list[str]) -> Result:
    return CliRunner().invoke(app, args, catch_exceptions=False)


def pid_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def default_sigint() -> None:
    """Run in the child before exec: SIGINT back to its default action, so Python installs its Ctrl-C handler
    whatever this process was started with (``nohup make test &`` starts it ignored, and a child inherits that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
