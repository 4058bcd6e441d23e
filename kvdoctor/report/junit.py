"""JUnit XML (via junitparser): one test case per gate, so CI dashboards show which gate failed."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from pathlib import Path

from kvdoctor.core.record import record
from kvdoctor.report.atomic import write_text

PASSED, FAILED, SKIPPED, ERROR = "passed", "failed", "skipped", "error"


@functools.cache
def _not_xml() -> re.Pattern[str]:
    """Characters XML 1.0 cannot carry at all (not even escaped): a log tail's ANSI colour codes and
    stray NULs would otherwise make the whole file unparseable. Compiled on first use (about 10 ms:
    the astral-plane range), by the run that writes a JUnit file, not by every importer."""
    return re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_safe(text: str) -> str:
    return _not_xml().sub("", text)


@record(frozen=True)
class Case:
    """One check. ``status`` is passed, failed (a red verdict), skipped, or error (it never ran)."""

    name: str
    status: str
    message: str = ""
    details: str = ""
    time_s: float = 0.0


def render(suite: str, cases: Sequence[Case], *, classname: str = "kvdoctor") -> str:
    from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite

    testsuite = TestSuite(xml_safe(suite))
    for case in cases:
        details = xml_safe(case.details)
        test = TestCase(xml_safe(case.name), classname=xml_safe(classname), time=case.time_s)
        outcome = {FAILED: Failure, SKIPPED: Skipped, ERROR: Error}.get(case.status)
        if outcome is not None:
            result = outcome(xml_safe(case.message))
            if details:
                result.text = details
            test.result = [result]
        elif details:
            test.system_out = details
        testsuite.add_testcase(test)
    testsuite.update_statistics()
    xml = JUnitXml()
    xml.add_testsuite(testsuite)
    xml.update_statistics()
    return xml.tostring().decode("utf-8")


def write(path: Path, suite: str, cases: Sequence[Case], *, classname: str = "kvdoctor") -> None:
    write_text(path, render(suite, cases, classname=classname))
