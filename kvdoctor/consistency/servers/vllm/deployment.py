"""vLLM's side of a consistency run (:class:`kvdoctor.consistency.servers.Deployment`).

Two vLLM servers (:mod:`kvdoctor.consistency.servers.vllm.plan`), vLLM's completions API (``client.vllm_api``),
preemptions from ``vllm:num_preemptions_total`` (:mod:`kvdoctor.consistency.probe_vllm`), faults from kvdoctor's
vLLM plugin (:mod:`kvdoctor.engines.vllm.server_plugin`), counted from its log. ``--scenario prefix-cache``
(:mod:`kvdoctor.consistency.prefix`) sends its phases in order to each server instead of one burst, and proves the
subject's prefix-cache hits from ``vllm:prefix_cache_hits_total`` in place of preemptions. ``--scenario offload``
is preempt's run with the OffloadingConnector on the pressured server: its loads from the CPU tier
(``vllm:kv_offload_load_bytes``) are proven beside the preemptions (:func:`kvdoctor.consistency.gates.offload`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvdoctor._exceptions import EXIT_GATE, EXIT_PASS, InputError
from kvdoctor.consistency import attribution, context_limit, deploy, fault_file, gates, prefix, runnable
from kvdoctor.consistency.client import Api, vllm_api
from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.prepared import ConsistencyOptions, Prepared, check_footprint, check_footprint_counts
from kvdoctor.consistency.probe_vllm import (
    OffloadCount,
    OffloadProbe,
    PreemptionProbe,
    PrefixCacheCount,
    PrefixCacheProbe,
)
from kvdoctor.consistency.result import (
    ConsistencyResult,
    OffloadDoc,
    OffloadResult,
    PrefixCacheDoc,
    PrefixCacheResult,
    Result,
    settled,
)
from kvdoctor.consistency.scenario import OFFLOAD, PREEMPT, PREFIX_CACHE
from kvdoctor.consistency.servers import Notify, Probe
from kvdoctor.consistency.servers.vllm import plan as deploy_vllm
from kvdoctor.consistency.shrink import shrink as shrink_config
from kvdoctor.consistency.workload import prompts
from kvdoctor.core.faults import StatePath
from kvdoctor.deploy import http
from kvdoctor.deploy import ports as pd_ports
from kvdoctor.engines import hook_log


def options(prepared: Prepared, model_dir: str, plugin_log: str | None) -> deploy_vllm.VllmDeployOptions:
    o = prepared.options
    return deploy_vllm.VllmDeployOptions(
        model_dir=model_dir,
        device=o.device,
        workload=o.workload,
        config=prepared.config,
        source=prepared.source or o.model,
        host=o.host,
        extra_args=o.extra_args,
        inject=o.inject,
        plugin_log=plugin_log,
        shrunk=o.shrink,
        scenario=o.scenario,
    )


class VllmDeployment:
    scenarios = (PREEMPT, PREFIX_CACHE, OFFLOAD)

    def require_environment(self, o: ConsistencyOptions) -> None:
        """vLLM's CPU server runs in this interpreter: exit 2 naming the vLLM server environment when it cannot."""
        from kvdoctor.core import environments

        environments.require(environments.VLLM_SERVER, "kvdoctor consistency --server vllm")

    def check(self, o: ConsistencyOptions) -> None:
        if o.topology != "single":
            raise InputError(
                f"--server vllm runs --topology single only, got {o.topology!r}: vLLM's PD (a KV connector) is not "
                "part of kvdoctor consistency; vLLM preempts by recompute on one server"
            )
        if o.plan is not None:
            raise InputError("a PD deployment's choices (pd-eval --oracle tokens) are SGLang's; --server vllm has none")

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
        if o.scenario == PREFIX_CACHE:
            evict = prefix.evict_requests(w, sized.block_size, sized.pressured_blocks)
            check_footprint_counts(prepared, requests=w.requests + evict, prompt_tokens=served.prompt_tokens)
            phased = prefix.build(w, prepared.vocab_size, sized.block_size, sized.pressured_blocks)
            prepared = replace(prepared, prefix=phased)
            check_footprint(prepared, self.plan(prepared, "<model>", None))
            return replace(prepared, prompts=phased.compared)
        check_footprint(prepared, self.plan(prepared, "<model>", None))
        return replace(prepared, prompts=prompts(w, prepared.vocab_size))

    def plan(self, prepared: Prepared, model_dir: str, run_dir: Path | None) -> deploy.Deployment:
        o = prepared.options
        base = run_dir if run_dir is not None else Path("<run-dir>")
        free = pd_ports.free_ports(2, host=o.host) if run_dir is not None else [30000, 30001]
        planned = deploy_vllm.build(options(prepared, model_dir, str(base / deploy_vllm.PLUGIN_LOG)), free)
        return fault_file.place(planned, o, base)  # --fault-file: its server's env

    def api(self) -> Api:
        return vllm_api(deploy_vllm.SERVED_NAME)

    def probes(self, prepared: Prepared, url: str, log: Path) -> dict[str, Probe]:
        out: dict[str, Probe] = {}
        if prepared.prefix is not None:
            out["prefix_cache"] = PrefixCacheProbe(url)
        if prepared.options.scenario == OFFLOAD:
            out["offload"] = OffloadProbe(url)
        out["pressure"] = PreemptionProbe(url)
        return out

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
        ref, press = evidence["reference"], evidence["pressured"]
        out: dict[str, Any] = {}
        if "prefix_cache" in ref and "prefix_cache" in press:
            out["prefix_hits"] = (ref["prefix_cache"], press["prefix_cache"])
            if isinstance(result, PrefixCacheResult) and prepared.prefix is not None:
                result = record_prefix_cache(result, prepared, *out["prefix_hits"], got)
                hits = result.prefix_cache["hits"]
                say("compare", f"prefix-cache hit tokens: reference {hits['reference']}, pressured {hits['pressured']}")
        if "offload" in ref and "offload" in press:
            out["offload_loads"] = (ref["offload"], press["offload"])
            if isinstance(result, OffloadResult):
                result = record_offload(result, prepared, *out["offload_loads"])
                moved = press["offload"]
                say("compare", f"bytes loaded from the CPU tier: pressured {moved.load_bytes} ({moved.source})")
        return result, out

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


def record_prefix_cache(
    result: PrefixCacheResult,
    prepared: Prepared,
    reference: PrefixCacheCount,
    subject: PrefixCacheCount,
    got: list[Generation],
) -> PrefixCacheResult:
    """RESULT with the prefix-cache evidence: both servers' counters, the mamba cache modes, the subject's cached
    tokens per compared request and per phase, and a warning when the eviction wave evicted no prefix."""
    pw = prepared.prefix
    assert pw is not None
    phases = pw.compared_phases
    cached = [g.cached_tokens for g in got]
    again = [c for ph, c in zip(phases, cached, strict=True) if ph == "again" and c is not None]
    recomputed = sum(c < pw.prefix_tokens for c in again) if again else None
    served = {"reference": reference.config, deploy_vllm.SUBJECT: subject.config}
    warnings: list[str] = []
    evidence: PrefixCacheDoc = {
        "workload": pw.to_dict(),
        "hits": {"reference": reference.hits, "pressured": subject.hits},
        "queries": {"reference": reference.queries, "pressured": subject.queries},
        "source": subject.source if subject.source == reference.source else f"{reference.source}/{subject.source}",
        "mamba_cache_mode": _mamba_modes(warnings, prepared, served),
        "server_cache_config": served,
        "request_phases": phases,
        "cached_tokens": cached,
        "by_phase": prefix.cached_by_phase(phases, cached),
        "recomputed_after_eviction": recomputed,
    }
    if recomputed == 0:
        warnings.append(
            "the eviction wave evicted no prefix: every request after it read its whole prefix from the cache"
        )
    unknown = sum(c is None for ph, c in zip(phases, cached, strict=True) if ph == "hit")
    if not any(c is not None for c in cached):
        warnings.append(
            "vLLM's replies carried no usage.prompt_tokens_details: per-request hits unknown (that every hit-phase "
            "request hit is not gated)"
        )
    elif unknown:
        warnings.append(
            f"{unknown} hit-phase request(s) carried no usage.prompt_tokens_details: that every hit-phase request "
            "hit is not gated"
        )
    return replace(result, prefix_cache=evidence, warnings=[*result.warnings, *warnings])


def _mamba_modes(
    warnings: list[str], prepared: Prepared, served: dict[str, dict[str, str] | None]
) -> dict[str, str | None]:
    """Each role's mamba cache mode: vLLM's own word (cache_config_info) over kvdoctor's prediction, a warning
    (onto WARNINGS) where they differ."""
    opts = options(prepared, "<model>", None)
    modes: dict[str, str | None] = {}
    for role, config in served.items():
        predicted = deploy_vllm.mamba_cache_mode(opts, role)
        said = (config or {}).get("mamba_cache_mode")
        modes[role] = (said or predicted) if predicted is not None else None
        if predicted is not None and said is not None and said != predicted:
            warnings.append(
                f"{role}: vLLM reports mamba_cache_mode {said!r}, kvdoctor predicted {predicted!r} "
                f"({deploy_vllm.MAMBA_CACHE_MODE_WHERE})"
            )
    return modes


def record_offload(
    result: OffloadResult, prepared: Prepared, reference: OffloadCount, subject: OffloadCount
) -> OffloadResult:
    """RESULT with the OffloadingConnector's evidence: the pressured server's CPU tier and both servers' counters."""
    opts = options(prepared, "<model>", None)
    per_request, tier = deploy_vllm.offload_bytes(opts)
    rows = {"reference": reference.to_dict(), "pressured": subject.to_dict()}
    evidence: OffloadDoc = {
        "kv_offloading_size_gib": float(deploy_vllm.offload_gib(opts)),
        "cpu_tier_bytes": int(tier),
        "request_bytes": per_request,
        **{key: {role: row[key] for role, row in rows.items()} for key in subject.to_dict()},
        "source": subject.source if subject.source == reference.source else f"{reference.source}/{subject.source}",
    }
    return replace(result, offload=evidence)


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
    failed = [d for d in log.details("fault-failed", "fault-refused") if d]
    f = replace(
        result.fault,
        installed="fault-installed" in names,
        restores=names.count("fault-fired"),  # resumed (or prefix-hit) requests whose state the fault zeroed
        refused=failed[0] if failed else None,
    )
    result = replace(result, fault=f)
    if not judged:
        return result
    fault = deploy_vllm.live_fault(f.name)
    path = fault.path if fault is not None else StatePath.PREEMPTION
    acts_on = {StatePath.PREFIX_HIT: gates.PREFIX_HIT, StatePath.OFFLOAD: gates.OFFLOAD_LOAD}.get(path, gates.RESUMED)
    return settled(
        replace(result, gates=[*result.gates, gates.fault_fired(f.name, f.installed, f.restores, f.refused, **acts_on)])
    )
