"""``kvdoctor --version``: kvdoctor's version first, then each server found here, from metadata only (issue 20)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def _fake_dist(root: Path, name: str, version: str) -> None:
    """An installed distribution's metadata and nothing else: no importable package beside it."""
    info = root / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def _version(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "kvdoctor", "--version"], capture_output=True, text=True, timeout=60, env=env
    )


def test_version_lists_each_server_found_and_whether_it_is_the_rules_revision(tmp_path: Path) -> None:
    from importlib.metadata import version

    _fake_dist(tmp_path, "sglang", "0.5.22")
    _fake_dist(tmp_path, "vllm", "0.33.0")
    out = _version(tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"kvdoctor {version('kvdoctor')}"  # the line scripts read stays first and unchanged
    assert lines[1] == "SGLang 0.5.22 (differs from the rules' 0.5.23; --engine sglang drives 0.5.20 to 0.5.23)"
    assert lines[2] == "vLLM 0.33.0 (the rules' revision)"


def test_version_says_a_server_is_not_installed(tmp_path: Path) -> None:
    from kvdoctor.cli.versions import ServerLine, server_line

    line = server_line(ServerLine("sglang", "SGLang", "0.5.23"), None)
    assert line == "SGLang: not installed (kvdoctor's rules: 0.5.23)"


def test_version_imports_no_server_and_no_torch(tmp_path: Path) -> None:
    """Found through importlib.metadata: a distribution whose package does not even import is still listed."""
    _fake_dist(tmp_path, "sglang", "0.5.23")
    code = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from kvdoctor.cli.versions import version_lines\n"
        "lines = version_lines()\n"
        "print(json.dumps([lines, [m for m in ('sglang', 'vllm', 'torch', 'triton') if m in sys.modules]]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    lines, imported = json.loads(out.stdout)
    assert imported == []
    assert "SGLang 0.5.23 (the rules' revision; --engine sglang drives 0.5.20 to 0.5.23)" in lines


def test_the_adapters_rules_version_is_the_one_the_rule_model_and_its_tables_restate() -> None:
    # The adapter keeps the version as a light constant (``--version`` and the range check must not load the
    # rule model); the rule model's revision and its generated flag table are the source it must equal.
    from kvdoctor.core.sglang._generated.server_flags import SGLANG_VERSION
    from kvdoctor.core.sglang.rules import RULES_REVISION
    from kvdoctor.engines.sglang._support import RULES_SGLANG_VERSION

    assert RULES_REVISION.startswith(f"sglang=={RULES_SGLANG_VERSION} ")
    assert SGLANG_VERSION == RULES_SGLANG_VERSION
