"""A real-server bench as every reporter reads it (``kvdoctor.report.reportable``): the status line and ``--json``.

No JUnit case and no step-summary row: a bench is not a CI check. Each bench (``bench consistency``, ``bench
replay``) subclasses :class:`BenchReport` with its command's names and its own record, which has ``exit_code``,
``warnings``, ``to_dict()`` and ``detail()``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.report.reportable import Reportable

__all__ = ["BenchReport"]


@dataclass(frozen=True)
class BenchReport(Reportable):
    """The bench as the status line reads it (no JUnit, no step summary: a bench is not a CI check)."""

    bench: Any
    command = "bench"
    suite = "kvdoctor bench"
    title = "kvdoctor bench"
    engine: EngineRef | None = None
    rules_revision = None

    @property
    def exit_code(self) -> int:
        return self.bench.exit_code

    @property
    def warnings(self) -> Sequence[str]:
        return self.bench.warnings

    def body(self) -> dict[str, Any]:
        return self.bench.to_dict()

    def detail(self) -> str:
        return self.bench.detail()

    def junit_cases(self) -> list[Any]:
        return []

    def summary_rows(self) -> list[Any]:
        return []
