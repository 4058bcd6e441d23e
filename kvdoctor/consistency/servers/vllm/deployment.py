"""vLLM's side of a consistency run (:class:`kvdoctor.consistency.servers.Deployment`).

Two vLLM servers (:mod:`kvdoctor.consistency.servers.vllm.plan`), vLLM's completions API (``client.vllm_api``),
preemptions from ``vllm:num_preemptions_total`` (:mod:`kvdoctor.consistency.probe_vllm`), faults from kvdoctor's
vLLM plugin (:mod:`kvdoctor.engines.vllm.server_plugin`), counted from its log. What a scenario changes (its plan
deltas, bounds, probes and evidence) is vLLM's part of it, one module each in this room (``preempt``,
``prefix_cache``, ``offload``: :data:`kvdoctor.consistency.servers.vllm.plan.SCENARIOS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvdoctor._exceptions import EXIT_GATE, EXIT_PASS, InputError
from kvdoctor.consistency import attribution, context_limit, deploy, fault_file, runnable
from kvdoctor.consistency.client import Api, vllm_api
from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.fault_gate import fault_fired_from
from kvdoctor.consistency.prepared import ConsistencyOptions, Prepared
from kvdoctor.consistency.probe_vllm import PreemptionProbe
from kvdoctor.consistency.result import ConsistencyResult, Result, settled
from kvdoctor.consistency.servers import Notify, Probe, load_part
from kvdoctor.consistency.servers.vllm import plan as deploy_vllm
from kvdoctor.consistency.servers.vllm.part import VllmPart, options
from kvdoctor.consistency.shrink import shrink as shrink_config
from kvdoctor.core import environments
from kvdoctor.deploy import http
from kvdoctor.deploy import ports as pd_ports
from kvdoctor.engines import hook_log


def part(scenario: str) -> VllmPart:
    """vLLM's part of SCENARIO (KeyError for one vLLM does not run: prepare refuses it first)."""
    found: VllmPart = load_part(deploy_vllm.SCENARIOS[scenario])
    return found


class VllmDeployment:
    scenarios = deploy_vllm.SCENARIOS

    def require_environment(self, o: ConsistencyOptions) -> None:
        """vLLM's CPU server runs in this interpreter: exit 2 naming the vLLM server environment when it cannot."""
        environments.require(environments.VLLM_SERVER, "kvdoctor consistency --server vllm")

    def check(self, o: ConsistencyOptions) -> None:
        if o.topology != "single":
            raise InputError(
                f"--server vllm runs --topology single only, got {o.topology!r}: vLLM's PD (a KV connector) is not "
                "part of kvdoctor consistency; vLLM preempts by recompute on one server"
            )
        if o.plan is not None:
            raise InputError("a PD deployment's choices (pd-eval --oracle tokens) are SGLang's; --server vllm has none")
        if o.server_path:
            raise InputError(
                "a release overlaid on the servers' PYTHONPATH is SGLang's (make sglang-overlay); vLLM's releases are "
                "its own environments (KVDOCTOR_VLLM_PYTHON)"
            )

    def check_extra_args(self, args: tuple[str, ...]) -> None:
        deploy_vllm.check_extra_args(args)

    def shrink(self, config: dict[str, Any]) -> dict[str, Any]:
        return shrink_config(config, server="vllm")

    def check_model(self, o: ConsistencyOptions, kind: runnable.ModelKind) -> None:
        return None  # what vLLM cannot run is refused by its grouping model when the pools are sized (bound)

    def check_fault(self, o: ConsistencyOptions, kind: runnable.ModelKind) -> None:
        assert o.inject is not None
        deploy_vllm.check_fault(o.inject, has_recurrent=kind.has_recurrent, scenario=o.scenario)

    def stand_in(self, device: str) -> bool:
        return False

    def bound(self, prepared: Prepared) -> Prepared:
        o, w = prepared.options, prepared.options.workload
        planned = options(prepared, "<model>", None)
        deploy_vllm.check_scenario(planned)
        served = deploy_vllm.served(planned)
        limit = context_limit.vllm(prepared.config, prepared.source, o.extra_args)
        context_limit.check(limit, w.prompt_tokens, w.max_new_tokens, "vllm", served.prompt_tokens - w.prompt_tokens)
        own = deploy_vllm.model_len(served)
        context_limit.check_own_vllm(limit, own, served.per_request_tokens, o.extra_args)
        sized = deploy_vllm.pools(planned)  # the sizing's refusals, before anything starts
        return part(o.scenario).bound(prepared, sized, served, lambda p: self.plan(p, "<model>", None))

    def plan(self, prepared: Prepared, model_dir: str, run_dir: Path | None) -> deploy.Deployment:
        o = prepared.options
        base = run_dir if run_dir is not None else Path("<run-dir>")
        free = pd_ports.free_ports(2, host=o.host) if run_dir is not None else [30000, 30001]
        planned = deploy_vllm.build(options(prepared, model_dir, str(base / deploy_vllm.PLUGIN_LOG)), free)
        return fault_file.place(planned, o, base)  # --fault-file: its server's env

    def api(self) -> Api:
        return vllm_api(deploy_vllm.SERVED_NAME)

    def probes(self, prepared: Prepared, url: str, log: Path) -> dict[str, Probe]:
        return {**part(prepared.options.scenario).probes(prepared, url), "pressure": PreemptionProbe(url)}

    def mark(self, prepared: Prepared, run_dir: Path, burst: str) -> None:
        return None

    def reset(self, prepared: Prepared, url: str, timeout_s: float) -> None:
        http.reset(f"{url}/reset_prefix_cache", timeout_s)  # vllm/entrypoints/serve/cache/api_router.py

    def record(
        self,
        result: ConsistencyResult,
        prepared: Prepared,
        evidence: Mapping[str, Mapping[str, Any]],
        got: list[Generation],
        say: Notify,
    ) -> tuple[ConsistencyResult, dict[str, Any]]:
        return part(prepared.options.scenario).record(result, prepared, evidence, got, say)

    def read_log(
        self,
        prepared: Prepared,
        run_dir: Path,
        result: ConsistencyResult,
        say: Notify,
        *,
        bursts: tuple[str, ...] | None = None,
    ) -> ConsistencyResult:
        # one case per launch (no bursts to cut); --fault-file's gate after the plugin's own
        log = hook_log.read(run_dir / deploy_vllm.PLUGIN_LOG)
        return fault_file.judge(prepared.options, log, read_plugin_log(run_dir, result))


DEPLOYMENT = VllmDeployment()


def read_plugin_log(run_dir: Path, result: Result) -> Result:
    """RESULT with what kvdoctor's vLLM plugin recorded: a fault asked for that never installed, never fired or
    failed is red (a fault run that hit nothing proves nothing)."""
    path = run_dir / deploy_vllm.PLUGIN_LOG
    log = hook_log.read(path)
    names = log.names()
    result = replace(
        result, stand_in={**result.stand_in, "vllm_plugin": {"log": str(path), "loaded": names.count("loaded")}}
    )
    judged = result.exit_code in (EXIT_PASS, EXIT_GATE)
    if result.fault is None:
        if judged and (stray := attribution.unrequested_gates(log, None)):
            # first: a fault nobody asked for makes the verdict unknown
            return settled(replace(result, gates=[*stray, *result.gates]))
        return result
    failed = [d for d in log.details("fault-failed", "fault-refused") if d]  # what the plugin said went wrong
    result = replace(result, fault=replace(result.fault, refused=failed[0] if failed else None))
    return fault_fired_from(
        log, result, deploy_vllm.SERVER
    )  # installed, fired, and the fault-fired gate on a judged run
