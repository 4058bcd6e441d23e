"""SGLang's side of a consistency run (:class:`kvdoctor.consistency.servers.Deployment`).

Two servers (``single``) or a shared prefill with a decode and a mini-lb per deployment (``pd``,
:mod:`kvdoctor.consistency.deploy`); retractions from ``/metrics`` (or the server's log) through
:class:`kvdoctor.deploy.metrics.RetractionProbe`; faults from kvdoctor's site hook
(:mod:`kvdoctor.engines.sglang.live_faults`), counted from its log with the CPU stand-in's calls
(:mod:`kvdoctor.engines.sglang.cpu_shims`); under ``pd`` the pressured decode's state trace joined with the
comparison (:mod:`kvdoctor.consistency.attribution`).
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvdoctor._exceptions import EXIT_GATE, EXIT_PASS, InputError
from kvdoctor.consistency import attribution, deploy, fault_file, gates, runnable, scenarios, state_bytes
from kvdoctor.consistency.client import SGLANG_API, Api
from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.fault_gate import fault_fired_from
from kvdoctor.consistency.prepared import STANDIN_LOG, ConsistencyOptions, Prepared
from kvdoctor.consistency.result import ConsistencyResult, settled
from kvdoctor.consistency.servers import Notify, Probe, load_part
from kvdoctor.consistency.servers.sglang import died, transfer
from kvdoctor.consistency.servers.sglang.part import SglangPart
from kvdoctor.consistency.shrink import shrink as shrink_config
from kvdoctor.core import environments
from kvdoctor.core import faults as registry
from kvdoctor.core.faults import Target
from kvdoctor.deploy import http
from kvdoctor.deploy import ports as pd_ports
from kvdoctor.deploy.metrics import RetractionProbe
from kvdoctor.engines import fault_list, hook_log
from kvdoctor.engines.sglang import live_faults
from kvdoctor.engines.sglang.cpu_shims import SHIM_DIR

HOOK_LOG = "site-hook.log"
ARM_FILE = "armed"  # the file the run names the armed fault in (kvdoctor.engines.arming)
# One line per scenario SGLang runs: its part (kvdoctor.consistency.servers.sglang.part).
SCENARIOS: dict[str, str] = {
    "preempt": "kvdoctor.consistency.servers.sglang.preempt:PART",
    "prefix-cache": "kvdoctor.consistency.servers.sglang.prefix_cache:PART",
    "transfer": "kvdoctor.consistency.servers.sglang.transfer:PART",
}


def part(scenario: str) -> SglangPart:
    """SGLang's part of SCENARIO (KeyError for one SGLang does not run: prepare refuses it first)."""
    found: SglangPart = load_part(SCENARIOS[scenario])
    return found


def stand_in_needed(device: str) -> bool:
    """The stand-in goes on the servers' path only on CPU and only when no real sgl_kernel is installed."""
    return device == "cpu" and importlib.util.find_spec("sgl_kernel") is None


def deploy_options(
    o: ConsistencyOptions,
    kind: runnable.ModelKind,
    model_dir: str,
    stand_in: bool,
    log_env: dict[str, str],
    digest_log: str | None = None,
    arm_file: str | None = None,
    reference_log: str | None = None,
) -> deploy.DeployOptions:
    hook = Path(SHIM_DIR).parent / "site_hook"
    needs_hook = o.inject is not None or o.topology == "pd" or o.fault_file is not None  # pd: its state trace
    return deploy.DeployOptions(
        model_dir=model_dir,
        topology=o.topology,
        device=o.device,
        workload=o.workload,
        has_recurrent=kind.has_recurrent,
        host=o.host,
        extra_args=o.extra_args,
        subject_args=o.subject_args,
        server_path=o.server_path,
        inject=o.inject,
        stand_in_dir=str(SHIM_DIR) if stand_in else None,
        site_hook_dir=str(hook) if needs_hook else None,
        inherited_pythonpath=os.environ.get("PYTHONPATH", ""),
        log_env=log_env,
        digest_log=digest_log if o.topology == "pd" else None,
        reference_digest_log=reference_log if o.topology == "pd" and kind.has_recurrent else None,
        state_bytes=attribution.STATE_BYTES if o.topology == "pd" and kind.has_recurrent else 0,
        choices=o.plan,
        arm_file=arm_file,
        prefill_faults=transfer.prefill_faults(o.inject),
        scenario=part(o.scenario).plan(o),
    )


class SglangDeployment:
    scenarios = SCENARIOS

    def require_environment(self, o: ConsistencyOptions) -> None:
        """SGLang's servers (and, over PD, Mooncake) run in this interpreter: exit 2 naming the SGLang server
        environment when it cannot (``kvdoctor.core.environments``)."""
        also = environments.PD_MODULES if o.topology == "pd" else ()
        environments.require(environments.SGLANG_SERVER, "kvdoctor consistency", also=also)

    def check(self, o: ConsistencyOptions) -> None:
        if o.topology not in deploy.TOPOLOGIES:
            raise InputError(f"--topology must be one of {', '.join(deploy.TOPOLOGIES)}, got {o.topology!r}")
        part(o.scenario).check(o)

    def check_extra_args(self, args: tuple[str, ...]) -> None:
        deploy.check_extra_args(args)

    def shrink(self, config: dict[str, Any]) -> dict[str, Any]:
        return shrink_config(config)

    def check_model(self, o: ConsistencyOptions, kind: runnable.ModelKind) -> None:
        if o.device == "cpu":
            runnable.check_cpu(kind, o.model)
        part(o.scenario).check_model(o, kind)

    def check_fault(self, o: ConsistencyOptions, kind: runnable.ModelKind) -> None:
        assert o.inject is not None
        live_faults.check(o.inject, has_recurrent=kind.has_recurrent, has_swa=kind.has_swa)
        for name in fault_list.decode(o.inject):  # each in the scenario its path names (kvdoctor.core.paths)
            path = registry.get(name, server="sglang", target=Target.SERVER).path
            scenarios.check_fault(o.scenario, name, path, SCENARIOS, part)
        if o.topology != "pd":
            deploy.build(deploy_options(o, kind, "<model>", False, {}), [0] * 6)  # raises the InputError

    def stand_in(self, device: str) -> bool:
        return stand_in_needed(device)

    def bound(self, prepared: Prepared) -> Prepared:
        return part(prepared.options.scenario).bound(prepared, lambda p: self.plan(p, "<model>", None))

    def plan(self, prepared: Prepared, model_dir: str, run_dir: Path | None) -> deploy.Deployment:
        o = prepared.options
        base = run_dir if run_dir is not None else Path("<run-dir>")
        log_env = {"KVDOCTOR_STANDIN_LOG": str(base / STANDIN_LOG), "KVDOCTOR_HOOK_LOG": str(base / HOOK_LOG)}
        count = deploy.ports_needed(o.topology, o.plan)
        free = pd_ports.free_ports(count, host=o.host) if run_dir is not None else list(range(30000, 30000 + count))
        digest_log = str(base / attribution.DIGEST_LOG)
        options = deploy_options(
            o,
            prepared.kind,
            model_dir,
            prepared.stand_in,
            log_env,
            digest_log,
            str(base / ARM_FILE),
            str(base / attribution.REFERENCE_DIGEST_LOG),
        )
        return fault_file.place(deploy.build(options, free), o, base)  # --fault-file: its servers' env

    def api(self) -> Api:
        return SGLANG_API

    def probes(self, prepared: Prepared, url: str, log: Path) -> dict[str, Probe]:
        return {**part(prepared.options.scenario).probes(prepared, url), "pressure": RetractionProbe(url, log)}

    def mark(self, prepared: Prepared, run_dir: Path, burst: str) -> None:
        hook_log.mark(run_dir / HOOK_LOG, burst)
        if prepared.options.topology == "pd" and burst.startswith("pressured"):  # the trace's events from here on
            attribution.mark_burst(run_dir / attribution.DIGEST_LOG, burst, time.time())  # are this burst's

    def reset(self, prepared: Prepared, url: str, timeout_s: float) -> None:
        # srt/entrypoints/http_server.py:1027-1040 flush_cache: the radix tree, once the server is idle (it waits up to
        # ?timeout= seconds for its last requests, else answers 400)
        http.reset(f"{url}/flush_cache?timeout={max(timeout_s - 5.0, 1.0):.0f}", timeout_s)

    def record(
        self,
        result: ConsistencyResult,
        prepared: Prepared,
        evidence: Mapping[str, Mapping[str, Any]],
        got: list[Generation],
        say: Notify,
    ) -> tuple[ConsistencyResult, dict[str, Any]]:
        site_log = Path(result.run_dir or ".") / HOOK_LOG
        return part(prepared.options.scenario).record(result, prepared, evidence, got, say, site_log)

    def read_log(
        self,
        prepared: Prepared,
        run_dir: Path,
        result: ConsistencyResult,
        say: Notify,
        *,
        bursts: tuple[str, ...] | None = None,
    ) -> ConsistencyResult:
        result = died.explained(read_hook_logs(run_dir, result, bursts), run_dir / HOOK_LOG)
        log = hook_log.read(run_dir / HOOK_LOG)
        result = fault_fired_from(log if bursts is None else log.bursts(*bursts), result, "sglang")
        result = fault_file.judge(prepared.options, hook_log.read(run_dir / HOOK_LOG), result)  # --fault-file's gate
        return trace(prepared, run_dir, result, say, bursts[-1] if bursts else None)


DEPLOYMENT = SglangDeployment()


def trace(
    prepared: Prepared, run_dir: Path, result: ConsistencyResult, say: Notify, burst: str | None = None
) -> ConsistencyResult:
    """PD: join the pressured decode's state trace (of BURST, one case's, in a many-case run) with the comparison;
    say why each diverging request did. Reported, not gated: the tokens and logprobs decide the verdict; the trace
    says where the state went wrong."""
    if prepared.options.topology != "pd" or not result.requests:
        return result
    log = hook_log.read(run_dir / HOOK_LOG)
    failed = log.details("digest-failed")
    mine = fault_file.name(prepared.options)  # --fault-file: a disagreement is the user's fault's, as --inject's is
    injected, by = (
        (result.fault.name, attribution.INJECT) if result.fault is not None else (mine, attribution.FAULT_FILE)
    )
    joined = attribution.attribute(
        run_dir / attribution.DIGEST_LOG,
        prepared.prompts,
        result.requests,
        injected=injected,
        injected_by=by,
        failure=failed[0] if failed else None,
        drifted=list((result.logprob_drift or {}).get("requests", [])),
        unrequested=attribution.unrequested_fault(log, prepared.options.inject or mine),
        burst=burst,
    )
    reference_log = run_dir / attribution.REFERENCE_DIGEST_LOG
    if reference_log.exists():  # a recurrent model's PD run: which state each backup holds, from the tensors
        kept = state_bytes.compare(
            run_dir / attribution.DIGEST_LOG, reference_log, prepared.prompts, result.requests, burst
        )
        joined.state_bytes = kept.to_dict()
        changed = [r.index for r in joined.requests if r.diverged or r.drift is not None]
        shown = state_bytes.lines(kept, changed)
    else:
        shown = []
    for line in [*joined.lines(), *shown]:
        say("attribute", line)
    incomplete = [] if joined.complete else [f"the state trace is incomplete ({joined.failure or 'see state_trace'})"]
    return replace(result, state_trace=joined, warnings=[*result.warnings, *incomplete])


def read_hook_logs(
    run_dir: Path, result: ConsistencyResult, bursts: tuple[str, ...] | None = None
) -> ConsistencyResult:
    """RESULT with what the servers' stand-in and site hook recorded (of BURSTS only, when given: one case of a
    many-case run); a stand-in call or a refused fault turns the run red."""
    calls_path = run_dir / STANDIN_LOG
    calls = calls_path.read_text(encoding="utf-8").split("\n") if calls_path.exists() else []
    called = [c.split(" ", 1)[-1] for c in calls if c.strip()]
    whole = hook_log.read(run_dir / HOOK_LOG)
    log = whole if bursts is None else whole.bursts(*bursts)
    if bursts is not None and result.fault is not None:  # one case among several faults: its own fault's events
        log = log.of_fault(result.fault.name)
    patched = sorted({d for d in log.details("patched") if d})
    result = replace(result, stand_in={**result.stand_in, "calls": called, "site_hook_patches": patched})
    if result.fault is not None:
        refused = [d for d in log.details("fault-refused") if d]
        fault = replace(
            result.fault,
            installed=log.count("fault-installed") > 0,
            backups=log.count("fault-offload"),
            restores=log.count("fault-restore"),
            refused=refused[0] if refused else None,
        )
        result = replace(result, fault=fault)
    failed = log.details("hook-failed")
    if result.exit_code not in (EXIT_PASS, EXIT_GATE):
        return result
    judged = list(result.gates)
    if called:
        gate = gates.stand_in(called, True)
        judged = [g for g in judged if g.name != gate.name] + [gate]
    if failed:
        judged.append(gates.Gate("site-hook", False, "site_hook_failed", f"kvdoctor's site hook failed: {failed[0]}"))
    # first: what diverged is then the fault's, so the verdict's reason is the fault nobody asked for
    if bursts is None:
        stray = attribution.unrequested_gates(log, result.fault and result.fault.name)
    else:  # one case among several: the run installed every case's fault at start-up; a control's burst fires none
        stray = [] if result.fault else attribution.unrequested_gates(whole.bursts(*bursts, startup=False), None)
    return settled(replace(result, gates=[*stray, *judged]))
