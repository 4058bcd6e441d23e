"""kvdoctor inside a project's own test suite: the pytest plugin (:mod:`kvdoctor.testing.plugin`) and
:func:`check`, the assertion whose failure message is the report's ``explain()``."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvdoctor.report.reportable import Reportable

__all__ = ["check"]


def check(report: Reportable) -> Reportable:
    """REPORT, when it passed; else an ``AssertionError`` whose message is ``report.explain()``: the verdict line,
    then what failed (the first divergence, the component, the server's file:line where the run traced it)."""
    __tracebackhide__ = True
    if not report.passed:
        raise AssertionError(report.explain())
    return report
