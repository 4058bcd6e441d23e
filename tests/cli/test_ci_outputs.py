"""JUnit files and GitHub step summaries of `inspect` and `roundtrip` agree with their verdicts."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

INKLING = ["inkling-small", "--kv-cache-dtype", "mxfp8", "--disaggregation-mode", "decode", "--page-size", "128"]


def kvdoctor(*args: str, summary: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    if summary is not None:
        env["GITHUB_STEP_SUMMARY"] = str(summary)
    return subprocess.run(
        [sys.executable, "-m", "kvdoctor", *args], capture_output=True, text=True, timeout=120, check=False, env=env
    )


def _cases(path: Path) -> dict[str, bool]:
    """Test case name -> failed?"""
    root = ET.parse(path).getroot()
    return {case.get("name"): case.find("failure") is not None for case in root.iter("testcase")}


def test_inspect_junit_and_summary_fail_exactly_when_strict_fails(tmp_path: Path) -> None:
    junit, summary = tmp_path / "inspect.xml", tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    args = [*INKLING, "--disaggregation-decode-retraction-backup", "host_pool", "--junit", str(junit)]
    out = kvdoctor("inspect", *args, "--strict", summary=summary)
    assert out.returncode == 1
    cases = _cases(junit)
    assert cases["KVD001-SSM-ON-HOST-POOL"] is True
    assert cases["no-error-hazards"] is True
    assert "KVD008-MXFP8-NEEDS-SM100" not in cases  # the default platform is SM100: SGLang accepts mxfp8
    text = summary.read_text()
    assert text.startswith("earlier step\n")  # appended, never overwritten
    assert "**FAILED**" in text and "KVD001-SSM-ON-HOST-POOL" in text


def test_inspect_without_strict_exits_0_and_its_reports_say_passed_naming_the_hazard(tmp_path: Path) -> None:
    junit, summary = tmp_path / "inspect.xml", tmp_path / "summary.md"
    args = [*INKLING, "--disaggregation-decode-retraction-backup", "host_pool", "--junit", str(junit)]
    out = kvdoctor("inspect", *args, summary=summary)
    assert out.returncode == 0
    cases = _cases(junit)
    assert not any(cases.values())  # no failure where the exit code says green
    assert "KVD001-SSM-ON-HOST-POOL" in cases and "not gated" in junit.read_text()
    text = summary.read_text()
    assert "**passed with warnings**" in text and "KVD001-SSM-ON-HOST-POOL" in text  # the JSON verdict's word
    assert "| KVD001-SSM-ON-HOST-POOL | error (not gated) | no error | ⚠️ warning |" in text  # reported as such


@pytest.mark.parametrize("strict", [False, True], ids=["lenient", "strict"])
def test_vllm_inspect_junit_and_summary_agree_with_its_exit_code(tmp_path: Path, strict: bool) -> None:
    """The vLLM mode used to write a failed summary while exiting 0: its reports follow the exit code too."""
    junit, summary = tmp_path / "vllm.xml", tmp_path / "summary.md"
    lmcache = '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'
    args = ["qwen3-next-80b-a3b", "--server", "vllm", "--kv-transfer-config", lmcache, "--junit", str(junit)]
    out = kvdoctor("inspect", *args, *(["--strict"] if strict else []), summary=summary)
    assert out.returncode == (1 if strict else 0), out.stderr
    cases = _cases(junit)
    assert "error: " in junit.read_text()  # this launch has an error hazard: vLLM refuses to group the hybrid model
    assert any(cases.values()) is strict
    assert ("**FAILED**" if strict else "**passed with warnings**") in summary.read_text()


def test_clean_inspect_has_a_passing_strict_case_and_no_summary_without_the_variable(tmp_path: Path) -> None:
    junit = tmp_path / "inspect.xml"
    assert kvdoctor("inspect", *INKLING, "--junit", str(junit)).returncode == 0
    assert _cases(junit)["no-error-hazards"] is False
    assert not list(tmp_path.glob("*.md"))


def test_roundtrip_junit_fails_exactly_the_broken_component(tmp_path: Path) -> None:
    junit, summary = tmp_path / "rt.xml", tmp_path / "summary.md"
    out = kvdoctor(
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
        "--junit",
        str(junit),
        summary=summary,
    )
    assert out.returncode == 1
    failed = {name for name, bad in _cases(junit).items() if bad}
    assert failed == {"conv_state"}
    assert "**FAILED**" in summary.read_text()


def test_unwritable_report_path_is_a_clean_input_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = kvdoctor("inspect", "inkling-small", "--junit", str(blocker / "sub" / "x.xml"))
    assert out.returncode == 2
    assert "cannot write a report" in out.stderr and "Traceback" not in out.stderr
