"""``inspect`` of an SGLang launch line: the rule model, and the installed SGLang beside it when asked."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kvdoctor._exceptions import InputError
from kvdoctor.api._inspect import InspectJob
from kvdoctor.api._job import ErrorCase
from kvdoctor.core.sglang.analysis import analyze
from kvdoctor.core.sglang.flags import parse_launch_line
from kvdoctor.core.sglang.inspect_result import InspectReport, inspect_report
from kvdoctor.engines import Adapter, Capability, GpuArch, Inspected, InspectQuestion
from kvdoctor.report.inspect_report import SUITE, sglang_facts

if TYPE_CHECKING:
    from kvdoctor.report import github


class SglangInspectJob(InspectJob):
    """``inspect`` of an SGLang launch line (the default server)."""

    def error_case(self) -> ErrorCase:
        return ErrorCase(SUITE, f"kvdoctor inspect {self.model}", self.junit_path)

    def work(self) -> Inspected:
        line = parse_launch_line(self.words(), own_options=self.own_options)
        self.title = f"kvdoctor inspect {line.model}"
        return _inspect(self.adapter, line.model, line.server_argv, self.gpu_arch, self.request_tokens, self.concurrent)

    def facts(self, report: Any) -> tuple[github.Row, ...]:
        # Not when kvdoctor refused the model and only SGLang answered (no rule-model facts to show).
        return sglang_facts(report) if isinstance(report, InspectReport) else ()


def _inspect(
    adapter: Adapter, model: str, argv: Sequence[str], arch: GpuArch, request_tokens: int, concurrent: int
) -> Inspected:
    """The rule model's result; with an engine that answers beside it, the engine's answers too (and a
    KVD015 hazard per disagreement). A refusal of the rule model is then the engine's to judge: it may
    still answer, and the refusal is drift."""
    beside = Capability.INSPECT in adapter.capabilities
    try:
        analysis, refusal = analyze(model, argv, platform=arch.platform()), None
    except InputError as exc:
        if not beside:
            raise
        analysis, refusal = None, str(exc)
    if not beside:
        return Inspected(inspect_report(analysis, request_tokens, concurrent))
    return adapter.beside(InspectQuestion(model, tuple(argv), arch, request_tokens, concurrent, analysis, refusal))
