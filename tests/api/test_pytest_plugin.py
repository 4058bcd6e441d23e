"""kvdoctor's pytest plugin, run as a server project runs it: ``pytest -p kvdoctor`` on a test file of its own
(``pytester``, in a subprocess: the plugin comes in through its ``pytest11`` entry point)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROUNDTRIPS = """
from kvdoctor.testing import check

SMALL = dict(device="cpu", tokens=32, requests=4)

def test_lfm2_keeps_its_state(kvdoctor_roundtrip):
    assert kvdoctor_roundtrip("lfm2-1.2b", **SMALL).passed

def test_lfm2_without_its_conv_state(kvdoctor_roundtrip):
    assert kvdoctor_roundtrip("lfm2-1.2b", inject="missing-mamba", **SMALL).passed

def test_lfm2_without_its_conv_state_checked(kvdoctor_roundtrip):
    check(kvdoctor_roundtrip("lfm2-1.2b", inject="missing-mamba", **SMALL))
"""


def test_a_green_check_passes_and_a_red_one_fails_with_its_explanation(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_roundtrips=ROUNDTRIPS)
    junit = pytester.path / "junit.xml"
    result = pytester.runpytest_subprocess("-p", "kvdoctor", f"--junitxml={junit}", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    # A plain assert names the verdict and the first reason on one line; check() fails with the whole explain().
    result.stdout.fnmatch_lines(["*where False = <kvdoctor roundtrip: verdict: FAILED*conv_state: * bytes differ*"])
    result.stdout.fnmatch_lines(["E*AssertionError: verdict: FAILED — differs: conv_state*", "E*conv_state: * bytes*"])
    assert out.count("- kvdoctor -") == 2  # the failure's own section, once per failed test
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    for name, verdict in (("test_lfm2_keeps_its_state", "pass"), ("test_lfm2_without_its_conv_state", "fail")):
        props = {p.get("name"): p.get("value") for p in cases[name].iter("property")}
        assert props["kvdoctor.roundtrip.verdict"] == verdict
        document = json.loads(Path(props["kvdoctor.roundtrip.report"]).read_text())
        assert document["command"] == "roundtrip" and document["verdict"] == verdict
        assert Path(props["kvdoctor.roundtrip.report"]).with_suffix(".xml").exists()  # its own JUnit, beside it


def test_the_markers_select_the_server_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_mixed="""
def test_on_a_server(kvdoctor_consistency):
    pass

def test_on_the_pools(kvdoctor_roundtrip):
    pass

def test_plain():
    pass
"""
    )
    servers = pytester.runpytest_subprocess("-p", "kvdoctor", "--collect-only", "-q", "-m", "kvdoctor_server")
    servers.stdout.fnmatch_lines(["test_mixed.py::test_on_a_server", "*1/3 tests collected (2 deselected)*"])
    quick = pytester.runpytest_subprocess("-p", "kvdoctor", "--collect-only", "-q", "-m", "not kvdoctor")
    quick.stdout.fnmatch_lines(["test_mixed.py::test_plain", "*1/3 tests collected (2 deselected)*"])


def test_the_plugin_is_inert_in_a_run_that_does_not_use_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_plain="""
import sys

def test_nothing_of_kvdoctor_was_imported_but_the_plugin():
    heavy = sorted(m for m in sys.modules if m in ("torch", "kvdoctor.api", "rich", "typer"))
    assert heavy == [], heavy
    assert "kvdoctor.testing.plugin" in sys.modules
"""
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_without_the_plugin_the_fixtures_are_not_there(pytester: pytest.Pytester) -> None:
    """The protection removed: the same file with the plugin blocked errs (its fixtures come from the plugin)."""
    pytester.makepyfile(test_roundtrips=ROUNDTRIPS)
    result = pytester.runpytest_subprocess("-p", "no:kvdoctor", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines(["*fixture 'kvdoctor_roundtrip' not found*"])


def test_the_docs_pytest_example_runs_as_written(pytester: pytest.Pytester) -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "ci.md").read_text(encoding="utf-8")
    example = text.split("<!-- example: pytest", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    pytester.makepyfile(test_example=example)
    pytester.runpytest_subprocess("-p", "kvdoctor", "-p", "no:cacheprovider").assert_outcomes(passed=3)
