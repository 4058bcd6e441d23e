"""Issue 43 (1, 8, 17): a real-server command run from an environment that cannot run its servers says so first.

In the main environment (``make demo`` / ``make test``: kvdoctor and torch, no server) every real-server command used
to start work and end ``internal error: ModuleNotFoundError: No module named 'transformers'`` (exit 4) after making a
run directory, or launch a server that died at once (pd-eval, exit 3). Each now exits 2 with one line naming the
environment to build (its folder, its ``make`` target), before any run directory exists. The environments are one
table (``kvdoctor.core.environments``), held here to the Makefile that builds them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvdoctor._exceptions import InputError
from kvdoctor.core import environments

ROOT = Path(__file__).resolve().parents[2]
SERVER_HERE = not environments.missing(("sglang", "transformers", "mooncake"))
VLLM_SERVER_HERE = not environments.missing(("vllm", "transformers"))


def _kvdoctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvdoctor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        check=False,
    )


@pytest.mark.skipif(SERVER_HERE, reason="the SGLang server environment is this one")
@pytest.mark.parametrize(
    "args",
    [
        ["consistency", "llama-3.1-8b", "--shrink"],
        ["consistency", "llama-3.1-8b", "--shrink", "--topology", "pd", "--json"],
        ["pd-eval", "llama-3.1-8b", "--oracle", "tokens", "--shrink", "--device", "cpu"],
        ["pd-eval", "llama-3.1-8b"],
        ["replay", "--bug", "sglang#29368"],
        ["replay", "--all"],
        ["bench", "consistency", "llama-3.1-8b", "--shrink"],
        ["bench", "replay", "--bug", "sglang#29368"],
    ],
    ids=["consistency", "consistency-pd-json", "pd-eval-tokens", "pd-eval-gsm8k", "replay", "replay-all",
         "bench-consistency", "bench-replay"],
)  # fmt: skip
def test_a_real_server_command_names_the_server_environment_before_any_work(args: list[str], tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = _kvdoctor(*args, "--output-dir", str(out))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert lines[-1].startswith("kvdoctor: error: kvdoctor ") and "needs the SGLang server environment" in lines[-1]
    assert "make server-env" in lines[-1] and ".venv-server/bin/kvdoctor" in lines[-1]
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert not out.exists(), "no run directory, no checkpoint before the environment is there"
    if "--json" not in args:
        assert len(lines) <= 1 or not any(line.startswith("[checkpoint]") for line in lines)


@pytest.mark.skipif(VLLM_SERVER_HERE, reason="the vLLM server environment is this one")
def test_consistency_on_vllm_names_the_vllm_server_environment(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = _kvdoctor("consistency", "llama-3.1-8b", "--shrink", "--server", "vllm", "--output-dir", str(out))
    assert done.returncode == 2, done.stderr
    assert "make vllm-server-env" in done.stderr and ".venv-vllm-server" in done.stderr
    assert not out.exists()


@pytest.mark.skipif(SERVER_HERE, reason="the SGLang server environment is this one")
def test_the_api_raises_kvdoctors_input_error_naming_the_environment(tmp_path: Path) -> None:
    from kvdoctor import api

    with pytest.raises(InputError, match=r"make server-env"):
        api.consistency("llama-3.1-8b", shrink=True, output_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(SERVER_HERE, reason="the SGLang server environment is this one")
def test_a_dry_run_still_prints_its_plan_without_the_environment() -> None:
    done = _kvdoctor("consistency", "llama-3.1-8b", "--shrink", "--topology", "pd", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "sglang.launch_server" in done.stdout


def test_a_user_launcher_that_is_no_program_is_refused_before_launch(tmp_path: Path) -> None:
    done = _kvdoctor("pd-eval", "llama-3.1-8b", "--launcher", "no-such-launcher-xyz", "--output-dir", str(tmp_path))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "kvdoctor: error: --launcher 'no-such-launcher-xyz': no-such-launcher-xyz is not a program on PATH"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ["/no/such/python", "no-such-python-xyz"])
def test_kvdoctor_vllm_python_naming_no_interpreter_is_bad_input(value: str, tmp_path: Path) -> None:
    done = _kvdoctor(
        "replay", "--bug", "vllm#53084", "--output-dir", str(tmp_path / "o"), env={"KVDOCTOR_VLLM_PYTHON": value}
    )
    assert done.returncode == 2, done.stderr
    assert f"KVDOCTOR_VLLM_PYTHON={value}: no such interpreter" in done.stderr
    assert "Traceback" not in done.stderr and "FileNotFoundError" not in done.stderr


def test_require_names_what_is_missing_and_how_to_build_it() -> None:
    env = environments.SGLANG_SERVER
    with pytest.raises(InputError) as raised:
        environments.require(env, "kvdoctor thing", also=("kvdoctor_no_such_module_xyz",))
    line = str(raised.value)
    assert "\n" not in line and "kvdoctor_no_such_module_xyz" in line
    assert f"make {env.make}" in line and env.kvdoctor in line and env.size in line
    environments.require(env, "kvdoctor thing", modules=("json",))  # present: nothing raised


def test_every_environment_is_a_makefile_target_that_builds_its_folder() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([A-Za-z][\w-]*):", makefile, re.M))
    for env in environments.ENVIRONMENTS:
        assert env.make in targets, env
        assert re.search(rf"^\w*VENV \?= {re.escape(env.folder)}$", makefile, re.M), env.folder
    assert len({e.folder for e in environments.ENVIRONMENTS}) == len(environments.ENVIRONMENTS)


def test_the_readme_table_is_the_records() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    table = text.split(environments.README_BEGIN)[1].split(environments.README_END)[0]
    assert table == environments.markdown(), "README.md's environments are stale: python -m kvdoctor.core.environments"


def test_the_readme_counts_the_faults_the_registry_holds() -> None:
    """Issue 43 (6): the README said 27 faults where ``kvdoctor faults`` printed 37 records under 25 names."""
    from kvdoctor.core import faults

    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    said = re.search(r"every fault `--inject` takes \((\d+) fault records under (\d+) names", text)
    assert said is not None, "README's faults paragraph lost its count"
    records = faults.faults()
    assert (int(said.group(1)), int(said.group(2))) == (len(records), len({f.name for f in records}))


def test_the_root_help_names_every_environment_and_its_make_target() -> None:
    """Issue 43 (5): ``--help`` said nothing of which command needs which environment."""
    done = _kvdoctor("--help", env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    for env in environments.ENVIRONMENTS:
        assert f"{env.folder}/ (make {env.make}, {env.size}):" in text, env.folder
