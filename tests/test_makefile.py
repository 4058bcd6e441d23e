"""Issue 43 (3): the README's two commands make and use their own virtualenv (a Debian or Ubuntu system Python refuses
``pip install`` outside one, PEP 668), and a Python that cannot make one fails in one line naming the fix."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make here")


def _make(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("target", ["demo", "test"])
def test_both_commands_install_into_their_own_virtualenv(target: str, tmp_path: Path) -> None:
    venv = tmp_path / "v"
    plan = _make("-n", target, f"VENV={venv}")
    assert plan.returncode == 0, plan.stderr
    lines = plan.stdout.splitlines()
    assert any(line.endswith(f"-m venv {venv}") or f"-m venv {venv} " in line for line in lines), plan.stdout
    installs = [line for line in lines if " -m pip install " in line]
    assert installs and all(line.startswith(f"{venv}/bin/python -m pip install") for line in installs), installs
    assert not any(line.startswith(("python3 -m pip", "pip ")) for line in lines)


def test_a_python_that_cannot_make_a_virtualenv_fails_in_one_line(tmp_path: Path) -> None:
    venv = tmp_path / "v"
    done = _make("demo", "PY=false", f"VENV={venv}")
    assert done.returncode != 0
    assert "install your Python's venv module (Debian, Ubuntu: apt-get install python3-venv)" in done.stderr
    assert not venv.exists(), "no half-made virtualenv left behind"


def test_torch_index_adds_an_index_only_when_asked(tmp_path: Path) -> None:
    venv = tmp_path / "v"
    plain = _make("-n", "demo", f"VENV={venv}").stdout
    cpu = _make("-n", "demo", f"VENV={venv}", "TORCH_INDEX=https://download.pytorch.org/whl/cpu").stdout
    assert "--extra-index-url" not in plain
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in cpu


def test_make_test_without_a_browser_or_a_way_to_install_one_fails_in_one_line(tmp_path: Path) -> None:
    """``make test`` opens the sweep's page in Chromium: with no chromium and no apt-get, one line naming the fix; with
    chromium and chromedriver on the PATH, nothing to install."""
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("sh", "id", "echo", "make"):  # what the recipe itself runs; no chromium, no apt-get
        found = shutil.which(tool)
        if found:
            (bare / tool).symlink_to(found)
    env = {"PATH": str(bare)}
    done = subprocess.run(
        [str(bare / "make"), "--no-print-directory", "-C", str(ROOT), "browser-apt"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[0].startswith("make test opens the sweep's page in a headless Chromium"), (
        done.stderr
    )
    for tool in ("chromium", "chromedriver"):
        (bare / tool).write_text("#!/bin/sh\n", encoding="utf-8")
        (bare / tool).chmod(0o755)
    present = subprocess.run(
        [str(bare / "make"), "--no-print-directory", "-C", str(ROOT), "browser-apt"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert present.returncode == 0 and "chromium and chromedriver present" in present.stdout, present.stderr
