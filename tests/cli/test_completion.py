"""Shell completion through the real console script: Typer's, driven by ``_KVDOCTOR_COMPLETE``.

``main()`` runs the app with ``standalone_mode=False`` and a fixed ``prog_name``; completion must still
answer (and exit 0) before any command runs, for the console script and for ``python -m kvdoctor`` alike.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvdoctor.schemas import SchemaName


def _script() -> list[str]:
    beside = Path(sys.executable).with_name("kvdoctor")
    found = str(beside) if beside.exists() else shutil.which("kvdoctor")
    if found is None:
        pytest.skip("the kvdoctor console script is not installed (pip install -e .)")
    return [found]


MODULE = [sys.executable, "-m", "kvdoctor"]


def run(argv: list[str], *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("_KVDOCTOR", "_TYPER_COMPLETE"))}
    return subprocess.run(
        [*argv, *args], capture_output=True, text=True, timeout=60, check=False, env={**clean, **(env or {})}
    )


def complete_bash(argv: list[str], words: str) -> list[str]:
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    out = run(argv, env={"_KVDOCTOR_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)})
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    return out.stdout.split()


@pytest.mark.parametrize("how", ["script", "module"])
def test_bash_completes_a_command_name(how: str) -> None:
    argv = _script() if how == "script" else MODULE
    assert complete_bash(argv, "kvdoctor ins") == ["inspect"]
    bench = ["mxfp8", "roundtrip", "pd-eval", "startup", "consistency", "replay"]
    assert complete_bash(argv, "kvdoctor bench ") == bench


def test_bash_completes_schema_kinds() -> None:
    assert complete_bash(_script(), "kvdoctor schema ") == [k.value for k in SchemaName]


def test_zsh_completion_answers_too() -> None:
    out = run(_script(), env={"_KVDOCTOR_COMPLETE": "complete_zsh", "_TYPER_COMPLETE_ARGS": "kvdoctor dr"})
    assert out.returncode == 0, out.stderr
    assert '"drift"' in out.stdout and "inspect" not in out.stdout


# Typer detects the user's shell from the parent processes (none under a CI runner); this variable makes
# --show-completion / --install-completion take the shell as their value instead.
NAMED_SHELL = {"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}


def test_show_completion_prints_the_script_for_kvdoctor() -> None:
    out = run(_script(), "--show-completion", "bash", env=NAMED_SHELL)
    assert out.returncode == 0, out.stderr
    assert "_KVDOCTOR_COMPLETE=complete_bash" in out.stdout
    assert out.stdout.rstrip().endswith("kvdoctor")  # `complete ... -F _kvdoctor_completion kvdoctor`


def test_install_completion_writes_under_home(tmp_path: Path) -> None:
    out = run(_script(), "--install-completion", "bash", env={**NAMED_SHELL, "HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    installed = tmp_path / ".bash_completions" / "kvdoctor.sh"
    assert "_KVDOCTOR_COMPLETE=complete_bash" in installed.read_text()
    assert str(installed.relative_to(tmp_path)) in (tmp_path / ".bashrc").read_text()


def test_version_and_help_still_work() -> None:
    version = run(_script(), "--version")
    assert version.returncode == 0 and version.stdout.startswith("kvdoctor "), version.stderr
    helped = run(_script(), "-h", env={"COLUMNS": "200"})
    assert helped.returncode == 0, helped.stderr
    assert "--install-completion" in helped.stdout and "--show-completion" in helped.stdout
    assert "Usage: kvdoctor " in helped.stdout
