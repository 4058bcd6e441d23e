"""JUnit XML (via junitparser): one test case per gate, so CI dashboards show which gate failed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kvdoctor.report.atomic import write_text

PASSED, FAILED, SKIPPED, ERROR = "passed", "failed", "skipped", "error"


@dataclass(frozen=True)
class Case:
    """One check. ``status`` is passed, failed (a red verdict), skipped, or error (it never ran)."""

    name: str
    status: str
    message: str = ""
    details: str = ""
    time_s: float = 0.0


def render(suite: str, cases: Sequence[Case], *, classname: str = "kvdoctor") -> str:
    from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite

    testsuite = TestSuite(suite)
    for case in cases:
        test = TestCase(case.name, classname=classname, time=case.time_s)
        outcome = {FAILED: Failure, SKIPPED: Skipped, ERROR: Error}.get(case.status)
        if outcome is not None:
            result = outcome(case.message)
            if case.details:
                result.text = case.details
            test.result = [result]
        elif case.details:
            test.system_out = case.details
        testsuite.add_testcase(test)
    testsuite.update_statistics()
    xml = JUnitXml()
    xml.add_testsuite(testsuite)
    xml.update_statistics()
    return xml.tostring().decode("utf-8")


def write(path: Path, suite: str, cases: Sequence[Case], *, classname: str = "kvdoctor") -> None:
    write_text(path, render(suite, cases, classname=classname))
