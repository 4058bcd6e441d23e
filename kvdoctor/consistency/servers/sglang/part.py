"""What every part of a scenario on SGLang answers (``consistency/servers/sglang/<scenario>.py``), with preempt's
answers as the defaults: a scenario's part says only where it differs.

Preempt changes nothing of SGLang's plan (the pressured server's tight pool forces the retractions, the pressure
gate proves them); prefix-cache sizes both pools itself and turns the radix cache off for the reference; transfer
keeps both decodes roomy and observes the transfer. Each part is one line of
:attr:`kvdoctor.consistency.servers.sglang.deployment.SglangDeployment.scenarios`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvdoctor.consistency import context_limit, deploy, runnable
from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.prepared import ConsistencyOptions, Prepared, check_footprint
from kvdoctor.consistency.result import ConsistencyResult
from kvdoctor.consistency.servers import Notify, Probe
from kvdoctor.consistency.workload import prompts

__all__ = ["SglangPart"]


class SglangPart:
    """SGLang's part of one scenario; every answer here is preempt's."""

    name = "preempt"

    def check(self, o: ConsistencyOptions) -> None:
        """The scenario's option checks on SGLang (exit 2), before anything is read."""

    def check_model(self, o: ConsistencyOptions, kind: runnable.ModelKind) -> None:
        """A model (or flags) the scenario cannot run on SGLang (exit 2)."""

    def needs(self, name: str, scenario: str) -> str | None:
        return None

    def refuses(self, name: str) -> str | None:
        return None

    def plan(self, o: ConsistencyOptions) -> deploy.ScenarioPlan:
        """What the scenario changes in SGLang's plan."""
        return deploy.ScenarioPlan()

    def bound(self, prepared: Prepared, plan: Callable[[Prepared], deploy.Deployment]) -> Prepared:
        """The context and this machine checked for the workload (PLAN: the dry plan of a prepared run), then the
        compared prompts."""
        o, w = prepared.options, prepared.options.workload
        limit = context_limit.sglang(prepared.config, prepared.source, o.extra_args)
        context_limit.check(limit, w.prompt_tokens, w.max_new_tokens, "sglang")
        check_footprint(prepared, plan(prepared))
        return replace(prepared, prompts=prompts(w, prepared.vocab_size))

    def probes(self, prepared: Prepared, url: str) -> dict[str, Probe]:
        """The scenario's probes around a burst on the server at URL (the pressure probe is the room's)."""
        return {}

    def record(
        self,
        result: ConsistencyResult,
        prepared: Prepared,
        evidence: Mapping[str, Mapping[str, Any]],
        got: list[Generation],
        say: Notify,
        site_log: Path,
    ) -> tuple[ConsistencyResult, dict[str, Any]]:
        """RESULT with the scenario's evidence (EVIDENCE: per role, each probe's finish; SITE_LOG: the site hook's
        log), and what the scenario's gates judge from it."""
        return result, {}

    def head_lines(self, prepared: Prepared, preview: deploy.Deployment) -> list[str]:
        return []

    def result_lines(self, result: ConsistencyResult) -> list[str]:
        return []
