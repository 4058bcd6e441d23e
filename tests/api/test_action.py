"""The GitHub Action (``action.yml``): its metadata checked against the shape GitHub reads, and its steps run in
order in a temporary workspace with a ``GITHUB_*`` environment, green and red.

Steps that are other actions are played by what they do here: ``actions/setup-python`` (this interpreter is the
Python), ``actions/cache`` (nothing to restore), ``actions/upload-artifact`` (its ``path`` copied into the
workspace's ``artifacts/<name>``). Every ``run`` step runs as written, in bash as GitHub runs it (``-eo
pipefail``), its ``env`` expressions evaluated (``inputs``, ``github``, ``runner``, ``steps.<id>.outputs``), its
``$GITHUB_OUTPUT`` read back. Its install step
builds kvdoctor from this checkout into a virtual environment (dependencies from this one: the package registries
at most, for the build backend).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))

STEP = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "id": {"type": "string"},
        "if": {"type": "string"},
        "uses": {"type": "string", "pattern": r"^[\w.-]+/[\w.-]+@v\d+$"},
        "with": {"type": "object"},
        "run": {"type": "string"},
        "shell": {"enum": ["bash"]},
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "additionalProperties": False,
    "oneOf": [{"required": ["uses"], "not": {"required": ["run"]}}, {"required": ["run", "shell"]}],
}
SCHEMA = {  # what GitHub reads of a composite action's metadata (docs.github.com: metadata syntax)
    "type": "object",
    "required": ["name", "description", "runs"],
    "properties": {
        "name": {"type": "string"},
        "description": {"type": "string"},
        "inputs": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["description"],
                "properties": {"description": {"type": "string"}, "required": {"type": "boolean"}, "default": {}},
                "additionalProperties": False,
            },
        },
        "outputs": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["description", "value"],
                "properties": {"description": {"type": "string"}, "value": {"type": "string"}},
                "additionalProperties": False,
            },
        },
        "runs": {
            "type": "object",
            "required": ["using", "steps"],
            "properties": {"using": {"const": "composite"}, "steps": {"type": "array", "items": STEP}},
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}
EXPRESSION = re.compile(r"\$\{\{\s*(.+?)\s*\}\}")


def test_the_metadata_is_a_composite_action_github_can_read() -> None:
    jsonschema.validate(ACTION, SCHEMA)
    ids = {s["id"] for s in ACTION["runs"]["steps"] if "id" in s}
    for text in re.findall(EXPRESSION, (ROOT / "action.yml").read_text(encoding="utf-8")):
        for step in re.findall(r"steps\.([\w-]+)\.outputs", text):
            assert step in ids, f"an expression reads the outputs of a step that is not there: {text}"
        for name in re.findall(r"inputs\.([\w-]+)", text):
            assert name in ACTION["inputs"], f"an expression reads an input that is not declared: {text}"
    assert set(ACTION["inputs"]) == {"command", "model", "args", "server", "python-version"}
    assert set(ACTION["outputs"]) == {"verdict", "report"}


class Runner:
    """The action's steps, in order, as GitHub runs a composite action's."""

    def __init__(self, workspace: Path, inputs: dict[str, str], action_path: Path = ROOT) -> None:
        self.workspace, self.outputs, self.action_path = workspace, {}, action_path
        defaults = {k: str(v.get("default", "")) for k, v in ACTION["inputs"].items()}
        self.inputs = {**defaults, **inputs}
        temp = workspace / "runner-temp"
        temp.mkdir(exist_ok=True)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_", "KVDOCTOR_"))}
        self.env.update(
            GITHUB_ACTIONS="true",
            GITHUB_WORKSPACE=str(workspace),
            GITHUB_ACTION_PATH=str(action_path),
            GITHUB_STEP_SUMMARY=str(workspace / "step-summary.md"),
            GITHUB_JOB="kvdoctor-test",
            RUNNER_TEMP=str(temp),
            RUNNER_OS="Linux",
        )
        self.steps: dict[str, dict[str, str]] = {}

    def value(self, expression: str) -> str:
        scope, _, rest = expression.partition(".")
        if scope == "inputs":
            return self.inputs[rest]
        if scope == "github":
            return {"action_path": str(self.action_path), "job": "kvdoctor-test"}[rest]
        if scope == "runner":
            return {"os": "Linux"}[rest]
        if scope == "steps":
            step, _, key = rest.partition(".outputs.")
            return self.steps.get(step, {}).get(key, "")
        raise AssertionError(f"an expression this runner does not know: {expression}")

    def expand(self, text: str) -> str:
        return EXPRESSION.sub(lambda m: self.value(m.group(1)), text)

    def run(self, played: dict[str, dict[str, str]] | None = None) -> list[tuple[str, int]]:
        """Every step in order; a step whose id is in PLAYED is not run: its outputs are those given."""
        ran: list[tuple[str, int]] = []
        failed = False
        for step in ACTION["runs"]["steps"]:
            if failed and step.get("if") != "always()":
                continue
            if step.get("id") in (played or {}):
                self.steps[step["id"]] = (played or {})[step["id"]]
                ran.append((step["name"], 0))
                continue
            code = self.uses(step) if "uses" in step else self.shell(step)
            ran.append((step["name"], code))
            failed = failed or code != 0
        return ran

    def uses(self, step: dict[str, Any]) -> int:
        action = step["uses"].split("@")[0]
        if action == "actions/upload-artifact":
            source = Path(self.expand(step["with"]["path"]))
            shutil.copytree(source, self.workspace / "artifacts" / self.expand(step["with"]["name"]))
        else:
            assert action in ("actions/setup-python", "actions/cache"), action
        return 0

    def shell(self, step: dict[str, Any]) -> int:
        output = self.workspace / f"output-{len(self.steps)}"
        output.write_text("")
        env = {**self.env, **{k: self.expand(v) for k, v in step.get("env", {}).items()}, "GITHUB_OUTPUT": str(output)}
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # the Python setup-python set
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
            env=env,
            cwd=self.workspace,
            check=False,
            timeout=900,
        )
        lines = [line.split("=", 1) for line in output.read_text().splitlines() if "=" in line]
        self.steps[step.get("id", f"step-{len(self.steps)}")] = dict(lines)  # type: ignore[arg-type]
        return done.returncode


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("action")


SMALL = "--device cpu --tokens 32 --requests 4"


def _run(workspace: Path, args: str) -> tuple[Runner, list[tuple[str, int]], Path]:
    case = workspace / f"case-{len(list(workspace.glob('case-*')))}"
    case.mkdir()
    shared = workspace / "runner-temp"  # one virtual environment for both runs: the second install is quick
    shared.mkdir(exist_ok=True)
    runner = Runner(case, {"command": "roundtrip", "model": "lfm2-1.2b", "args": args})
    runner.env["RUNNER_TEMP"] = str(shared)
    return runner, runner.run(), case


def test_the_steps_run_green_and_write_the_summary_the_artifact_and_the_outputs(workspace: Path) -> None:
    runner, ran, case = _run(workspace, SMALL)
    assert [code for _, code in ran] == [0] * len(ACTION["runs"]["steps"]), ran
    assert runner.steps["run"]["verdict"] == "pass" and runner.steps["run"]["exit-code"] == "0"
    assert "**passed**" in (case / "step-summary.md").read_text()
    artifact = case / "artifacts" / "kvdoctor-roundtrip-kvdoctor-test"
    assert '"verdict": "pass"' in (artifact / "report.json").read_text()
    assert (artifact / "junit.xml").read_text().count("<testcase") >= 2


def test_under_a_fault_the_action_fails_with_its_summary_and_reports(workspace: Path) -> None:
    runner, ran, case = _run(workspace, f"{SMALL} --inject 'missing-mamba'")  # args split as a shell does
    codes = dict(ran)
    assert codes["Run kvdoctor"] == 0 and codes["Upload the reports"] == 0  # the reports come back either way
    assert codes["Verdict"] == 1  # the job goes red with the command's own exit code
    assert runner.steps["run"]["verdict"] == "fail"
    summary = (case / "step-summary.md").read_text()
    assert "**FAILED**" in summary and "conv_state" in summary
    artifact = case / "artifacts" / "kvdoctor-roundtrip-kvdoctor-test"
    assert '"verdict": "fail"' in (artifact / "report.json").read_text()


def test_args_a_shell_cannot_split_are_bad_input_not_a_run(workspace: Path) -> None:
    runner, ran, case = _run(workspace, f"{SMALL} --inject 'missing-mamba")
    codes = dict(ran)
    assert codes["Run kvdoctor"] == 0 and codes["Verdict"] == 2, ran
    assert runner.steps["run"]["verdict"] == "error"
    assert "**bad input**" in (case / "step-summary.md").read_text()
    artifact = case / "artifacts" / "kvdoctor-roundtrip-kvdoctor-test"
    assert artifact.is_dir() and not (artifact / "report.json").exists()  # not the report an earlier step left


def test_the_docs_workflow_uses_the_actions_inputs_and_outputs() -> None:
    text = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    example = text.split("<!-- example: workflow", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    steps = yaml.safe_load(example)["jobs"]["kv-state"]["steps"]
    ours = next(s for s in steps if s.get("uses", "").startswith("kvdoctor/kvdoctor@"))
    assert set(ours["with"]) <= set(ACTION["inputs"]) and {"command"} <= set(ours["with"])
    assert ours["with"]["server"] in ("none", "sglang", "vllm")
    for output in re.findall(r"steps\.kvdoctor\.outputs\.([\w-]+)", example):
        assert output in ACTION["outputs"], output


def _step(step_id: str) -> dict[str, Any]:
    return next(s for s in ACTION["runs"]["steps"] if s.get("id") == step_id)


def _key(workspace: Path, action_path: Path, server: str = "none", python: str = "3.11") -> str:
    runner = Runner(workspace, {"command": "roundtrip", "server": server, "python-version": python}, action_path)
    assert runner.shell(_step("key")) == 0
    return runner.steps["key"]["key"]


def test_the_cache_key_changes_with_what_the_action_installs(tmp_path: Path) -> None:
    """hashFiles() sees only the workspace: on the action's own files (github.action_path) it hashed nothing and the
    key never changed. The key step hashes them itself; each file that decides the install moves the key."""
    text = (ROOT / "action.yml").read_text(encoding="utf-8")
    assert not [e for e in re.findall(EXPRESSION, text) if "hashFiles" in e]  # blind outside the workspace
    cache = next(s for s in ACTION["runs"]["steps"] if s.get("uses", "").startswith("actions/cache@"))
    assert cache["with"]["key"] == "${{ steps.key.outputs.key }}"
    names = [s["name"] for s in ACTION["runs"]["steps"]]
    assert names.index("Key the cache on what is installed") < names.index("Cache the environments")

    action = tmp_path / "action"
    (action / "constraints").mkdir(parents=True)
    for name in ("pyproject.toml", "Makefile", "README.md"):
        shutil.copy(ROOT / name, action / name)
    for constraints in (ROOT / "constraints").glob("*.txt"):
        shutil.copy(constraints, action / "constraints" / constraints.name)
    first = _key(tmp_path, action)
    assert first == _key(tmp_path, action)  # the same files: the same key
    assert first.startswith("kvdoctor-Linux-py") and "-none-" in first
    assert _key(tmp_path, action, server="sglang") != first
    (action / "README.md").write_text("not installed\n")
    assert _key(tmp_path, action) == first  # a file the install does not read leaves the key alone
    seen = {first}
    for change in ("constraints/cpu.txt", "pyproject.toml", "Makefile"):
        with (action / change).open("a") as fh:
            fh.write("\n# changed\n")
        key = _key(tmp_path, action)
        assert key not in seen, change
        seen.add(key)
    (action / "constraints" / "new.txt").write_text("six==1.16.0\n")
    assert _key(tmp_path, action) not in seen  # a new constraints file too


STUB = """#!/bin/sh
# kvdoctor as --help makes it: prints help, exits 0, no JSON; leaves a mark that it ran
echo "$@" >> "$(dirname "$0")/ran"
echo "Usage: kvdoctor [OPTIONS] COMMAND"
"""


def _stubbed(
    workspace: Path, model: str, args: str, command: str = "roundtrip"
) -> tuple[Runner, list[tuple[str, int]], Path, Path]:
    """The steps with the install played by a stub kvdoctor that exits 0 and prints no JSON."""
    case = workspace / f"stub-{len(list(workspace.glob('stub-*')))}"
    (case / "bin").mkdir(parents=True)
    stub = case / "bin" / "kvdoctor"
    stub.write_text(STUB)
    stub.chmod(0o755)
    runner = Runner(case, {"command": command, "model": model, "args": args})
    return runner, runner.run(played={"install": {"kvdoctor": str(stub)}}), case, case / "bin" / "ran"


@pytest.mark.parametrize(
    ("model", "args"),
    [("lfm2-1.2b", "--help"), ("--help", ""), ("lfm2-1.2b", "--device cpu -h"), ("lfm2-1.2b", "--version")],
)
def test_help_in_args_or_model_is_bad_input_before_kvdoctor_runs(tmp_path: Path, model: str, args: str) -> None:
    """`args: --help` used to give a green job with verdict=error and no report: help is no check."""
    runner, ran, case, ran_mark = _stubbed(tmp_path, model, args)
    codes = dict(ran)
    assert codes["Run kvdoctor"] == 0 and codes["Verdict"] == 2, ran
    assert runner.steps["run"]["verdict"] == "error" and runner.steps["run"]["exit-code"] == "2"
    summary = (case / "step-summary.md").read_text()
    assert "**bad input**" in summary and "asks for help" in summary
    assert not ran_mark.exists()  # refused before kvdoctor ran
    artifact = case / "artifacts" / "kvdoctor-roundtrip-kvdoctor-test"
    assert artifact.is_dir() and not (artifact / "report.json").exists()


def test_an_exit_0_without_a_verdict_is_not_a_green_job(tmp_path: Path) -> None:
    """Whatever else makes kvdoctor exit 0 with no verdict in its JSON (a --dry-run's plan), the job is red."""
    runner, ran, case, ran_mark = _stubbed(tmp_path, "lfm2-1.2b", "--dry-run")
    assert ran_mark.exists()
    assert dict(ran)["Verdict"] == 2, ran
    assert runner.steps["run"]["verdict"] == "error" and runner.steps["run"]["exit-code"] == "2"
    assert "without a verdict" in (case / "step-summary.md").read_text()


def test_a_sweeps_plan_is_no_check_and_a_sweep_writes_its_page_into_the_artifact(tmp_path: Path) -> None:
    _, ran, case, ran_mark = _stubbed(tmp_path, "lfm2-1.2b", "--shrink --plan", command="sweep")
    assert dict(ran)["Verdict"] == 2 and not ran_mark.exists(), ran
    assert "runs nothing" in (case / "step-summary.md").read_text()
    _, ran, case, ran_mark = _stubbed(tmp_path, "lfm2-1.2b", "--shrink", command="sweep")
    argv = ran_mark.read_text().split()
    assert argv[:2] == ["sweep", "lfm2-1.2b"] and "--html" in argv
    assert argv[argv.index("--html") + 1].endswith("/sweep.html") and argv[-1] == "--shrink"


def test_help_with_the_real_kvdoctor_is_red(workspace: Path) -> None:
    """The same through the real install: `args: --help` ends the job with exit 2 and says why."""
    runner, ran, case = _run(workspace, "--help")
    assert dict(ran)["Verdict"] == 2, ran
    assert runner.steps["run"]["verdict"] == "error"
    assert "asks for help" in (case / "step-summary.md").read_text()
