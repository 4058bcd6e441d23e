"""``kvdoctor faults``: every fault of the one registry, as tables that fold to the console and as one JSON document
valid against ``kvdoctor schema faults``; filters by server and state path; no torch, exit 0."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kvdoctor.core import faults
from tests.schema_check import assert_valid


def _kvdoctor(*args: str, columns: int = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1", "TERM": "dumb"}
    return subprocess.run(
        [sys.executable, "-m", "kvdoctor", "faults", *args], capture_output=True, text=True, timeout=120, env=env
    )


def test_json_lists_every_record_of_the_registry_and_validates() -> None:
    out = _kvdoctor("--json")
    assert out.returncode == 0, out.stderr
    doc = assert_valid(out.stdout, "faults")
    assert (doc["command"], doc["verdict"], doc["count"]) == ("faults", "pass", len(faults.faults()))
    listed = [(f["name"], f["server"], f["target"]) for f in doc["faults"]]
    assert listed == [(f.name, f.server, f.target.value) for f in faults.faults()]
    zero = next(f for f in doc["faults"] if f["name"] == "zero-kv")
    assert zero["formerly"] == ["drop-kv"] and zero["hooks"][0]["where"].startswith("vllm/v1/worker/")


@pytest.mark.parametrize(("args", "expected"), [(("--server", "vllm"), 10), (("--path", "prefix-hit"), 4)])
def test_filters_narrow_the_list(args: tuple[str, ...], expected: int) -> None:
    doc = assert_valid(_kvdoctor(*args, "--json").stdout, "faults")
    assert doc["count"] == expected == len(doc["faults"])
    key, value = args[0].lstrip("-"), args[1]
    assert {f[key] for f in doc["faults"]} == {value}


def test_every_fault_is_in_the_tables_and_they_fold_to_a_narrow_console() -> None:
    out = _kvdoctor(columns=60)
    assert out.returncode == 0 and out.stderr == ""
    assert max(len(line) for line in out.stdout.splitlines()) <= 60
    folded = out.stdout.replace("│", " ")
    for name in faults.names():
        assert f" {name} " in folded, name
    assert out.stdout.splitlines()[-1] == f"{len(faults.faults())} faults (every field: kvdoctor faults --json)"


def test_a_bad_path_is_one_line_and_exit_2() -> None:
    out = _kvdoctor("--path", "nowhere")
    assert out.returncode == 2 and out.stdout == "" and len(out.stderr.splitlines()) == 1


def test_it_imports_no_torch_and_no_server() -> None:
    code = (
        "import sys; sys.argv = ['kvdoctor', 'faults', '--json']\n"
        "from kvdoctor.cli import app\n"
        "try:\n    app.main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'sglang', 'vllm')), file=sys.stderr)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stderr.strip().splitlines()[-1] == "[]", out.stderr


def test_the_docs_table_is_the_registry() -> None:
    """docs/faults.md's table is generated from the registry: a fault added, renamed or re-cited shows here."""
    from pathlib import Path

    from kvdoctor.cli.faults_cmd import markdown

    text = (Path(__file__).resolve().parents[2] / "docs" / "faults.md").read_text(encoding="utf-8")
    table = text.split("(kvdoctor.cli.faults_cmd.markdown); tests/cli/test_faults_cmd.py -->\n")[1]
    assert table.split("<!-- end of faults table -->")[0] == markdown()
