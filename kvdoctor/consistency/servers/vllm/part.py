"""What every part of a scenario on vLLM answers (``consistency/servers/vllm/<scenario>.py``), with preempt's answers
as the defaults: a scenario's part says only where it differs.

Preempt's run: both servers with the same flags (a Mamba hybrid without prefix caching, whose 'align' mode crashes
vLLM on a CPU), the reference's pool roomy and the pressured server's a quarter of the concurrent demand
(:func:`kvdoctor.consistency.servers.vllm.plan.pressure_pools`), so vLLM must preempt. Each part is one line of
:data:`kvdoctor.consistency.servers.vllm.plan.SCENARIOS`; the plan asks a part its plan deltas
(:class:`~kvdoctor.consistency.servers.vllm.plan.PlanPart`), the room its bounds, probes, evidence and words.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.deploy import Deployment, Enabler
from kvdoctor.consistency.prepared import Prepared, check_footprint
from kvdoctor.consistency.result import ConsistencyResult
from kvdoctor.consistency.servers import Notify, Probe
from kvdoctor.consistency.servers.vllm import plan
from kvdoctor.consistency.servers.vllm.plan import Pools, VllmDeployOptions
from kvdoctor.consistency.workload import Workload, prompts
from kvdoctor.core.vllm.analysis import VllmAnalysis
from kvdoctor.core.vllm.grouping import Group

__all__ = ["VllmPart", "options"]


def options(prepared: Prepared, model_dir: str, plugin_log: str | None) -> VllmDeployOptions:
    """The plan's options for PREPARED's run (MODEL_DIR and PLUGIN_LOG: placeholders for a dry plan)."""
    o = prepared.options
    return VllmDeployOptions(
        model_dir=model_dir,
        device=o.device,
        workload=o.workload,
        config=prepared.config,
        source=prepared.source or o.model,
        host=o.host,
        extra_args=o.extra_args,
        subject_args=o.subject_args,
        inject=o.inject,
        plugin_log=plugin_log,
        shrunk=o.shrink,
        scenario=o.scenario,
    )


class VllmPart:
    """vLLM's part of one scenario; every answer here is preempt's."""

    name = "preempt"
    preset = "consistency-vllm"
    path_words = "a request resumed from preemption"  # what a fault on the scenario's path acts on

    def check(self, o: VllmDeployOptions) -> None:
        """What the scenario cannot run here, refused before launch (exit 2)."""

    def needs(self, name: str, scenario: str) -> str | None:
        """A fault on this scenario's path runs here only."""
        return (
            f"--inject {name} acts on {self.path_words}: it needs --scenario {self.name} (this run is --scenario "
            f"{scenario})"
        )

    def refuses(self, name: str) -> str | None:
        return None

    def cache_flags(self, o: VllmDeployOptions, role: str) -> tuple[str, ...]:
        """Prefix caching as vLLM defaults it, but off for a Mamba hybrid (:data:`plan.NO_PREFIX_CACHING`)."""
        return ("--no-enable-prefix-caching",) if plan.has_mamba(o) else ()

    def subject_flags(self, o: VllmDeployOptions) -> tuple[str, ...]:
        return ()

    def subject_env(self, o: VllmDeployOptions) -> dict[str, str]:
        return {}

    def served(self, o: VllmDeployOptions) -> Workload:
        return o.workload

    def pools(
        self, o: VllmDeployOptions, a: VllmAnalysis, groups: Sequence[Group], per_request: int
    ) -> tuple[int, int]:
        return plan.pressure_pools(o, a, groups, per_request)

    def enablers(self, o: VllmDeployOptions) -> list[Enabler]:
        return [plan.NO_PREFIX_CACHING] if plan.has_mamba(o) else []

    def bound(
        self, prepared: Prepared, sized: Pools, served: Workload, dry_plan: Callable[[Prepared], Deployment]
    ) -> Prepared:
        """What this machine holds for the run (DRY_PLAN: the plan of a prepared run, on placeholder ports), then
        the compared prompts; SIZED and SERVED: the pools and the workload as the servers get it."""
        check_footprint(prepared, dry_plan(prepared))
        return replace(prepared, prompts=prompts(prepared.options.workload, prepared.vocab_size))

    def probes(self, prepared: Prepared, url: str) -> dict[str, Probe]:
        """The scenario's probes around a burst on the server at URL (the preemption probe is the room's)."""
        return {}

    def record(
        self,
        result: ConsistencyResult,
        prepared: Prepared,
        evidence: Mapping[str, Mapping[str, Any]],
        got: list[Generation],
        say: Notify,
    ) -> tuple[ConsistencyResult, dict[str, Any]]:
        """RESULT with the scenario's evidence (EVIDENCE: per role, each probe's finish), and what the scenario's
        gates judge from it."""
        return result, {}

    def head_lines(self, prepared: Prepared, preview: Deployment) -> list[str]:
        return []

    def result_lines(self, result: ConsistencyResult) -> list[str]:
        return []
