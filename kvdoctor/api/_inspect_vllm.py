"""``inspect --server vllm``: vLLM's specs, groups and connector from the rule model (no torch); with
``engine="vllm"`` the installed vLLM answers too (its own spec classes, ``get_kv_cache_groups`` and connector
classes), every disagreement a KVD115 drift hazard. When vLLM cannot be imported the rule model still answers and
the answer's notes say why vLLM did not."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvdoctor.api._inspect import InspectJob
from kvdoctor.api._job import ErrorCase
from kvdoctor.core.config import load_config
from kvdoctor.core.vllm.analysis import analyze_vllm_config
from kvdoctor.core.vllm.flags import parse_vllm_flags, parse_vllm_launch_line
from kvdoctor.engines import Capability, Inspected, InspectQuestion
from kvdoctor.report.inspect_report import SUITE, vllm_facts

if TYPE_CHECKING:
    from kvdoctor.core.vllm.analysis import VllmReport
    from kvdoctor.report import github


class VllmInspectJob(InspectJob):
    """``inspect`` of a vLLM launch line."""

    def error_case(self) -> ErrorCase:
        return ErrorCase(SUITE, f"kvdoctor inspect --server vllm {self.model}", self.junit_path)

    def work(self) -> Inspected:
        line = parse_vllm_launch_line(self.words(), own_options=self.own_options)
        self.title = f"kvdoctor inspect --server vllm {line.model}"
        analysis = analyze_vllm_config(load_config(line.model), parse_vllm_flags(line.server_argv))
        if Capability.INSPECT not in self.adapter.capabilities:
            return Inspected(analysis.report())
        question = InspectQuestion(
            line.model, tuple(line.server_argv), self.gpu_arch, self.request_tokens, self.concurrent, analysis
        )
        return self.adapter.beside(question)

    def facts(self, report: VllmReport) -> tuple[github.Row, ...]:
        return vllm_facts(report)
