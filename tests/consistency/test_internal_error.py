"""An exception no rule anticipated, during deploy or compare, is kvdoctor's own failure: exit 4 ``internal_error``
as the README's exit-code table says (not 3, a deployment's), with result.json still written and valid, every
reporter saying error (issue 28, defect 14)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvdoctor._exceptions import EXIT_CODES, EXIT_INTERNAL
from kvdoctor.cli.app import app
from kvdoctor.consistency import checkpoint
from kvdoctor.consistency import run as run_mod
from tests.schema_check import assert_valid

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_and_the_exit_codes_agree_that_4_is_kvdoctors_own_failure() -> None:
    row = re.search(r"^\| 4 \| (.+) \|$", README.read_text(encoding="utf-8"), re.M)
    assert row is not None and "kvdoctor itself failed" in row.group(1)
    assert EXIT_CODES[EXIT_INTERNAL].startswith("kvdoctor itself failed")


@pytest.mark.parametrize("where", ["deploy", "compare"])
def test_an_unexpected_exception_is_exit_4_with_a_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, server_environment: None
) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()

    def ensure(config: object, seed: int, root: Path) -> checkpoint.Checkpoint:
        return checkpoint.Checkpoint(ckpt, "c" * 64, seed, "w" * 64, cached=True)

    def broken(*_args: object, **_kw: object) -> None:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(run_mod.checkpoint, "ensure", ensure)
    if where == "deploy":
        monkeypatch.setattr(run_mod.Supervisor, "start", broken)  # the first server's launch
    else:
        monkeypatch.setattr(run_mod, "evaluate", broken)
        monkeypatch.setattr(run_mod, "_deploy_and_compare", lambda *a: run_mod.evaluate())  # type: ignore[call-arg]
    out, junit = tmp_path / "out", tmp_path / "junit.xml"
    argv = ["consistency", "llama-3.1-8b", "--shrink", "--output-dir", str(out), "--json", "--junit", str(junit)]
    done = CliRunner().invoke(app, argv)
    assert done.exit_code == EXIT_INTERNAL, done.output
    (run_dir,) = out.glob("run-*")
    doc = assert_valid(json.loads((run_dir / "result.json").read_text()), "consistency")
    assert (doc["exit_code"], doc["verdict"], doc["exit_reason"]) == (4, "error", "internal_error")
    assert "Too many open files" in doc["message"]
    assert {c.get("name"): c[0].tag for c in ET.parse(junit).iter("testcase")}["deployment"] == "error"
