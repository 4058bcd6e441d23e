"""One consistency run, end to end, on pd-eval's deployment floor.

prepare (config → runnable? → shrink → workload → options; nothing starts) → run: a fresh run
directory (``kvdoctor.pd.rundir``), the seeded checkpoint (cached), the plan (``deploy``), every
process under one ``kvdoctor.pd.supervisor.Supervisor`` (new sessions, subreaper, teardown on every
path), health through ``wait_healthy``, retractions from ``/metrics`` through
``kvdoctor.pd.metrics.RetractionProbe``, one ``kvdoctor.pd.deadline.Deadline`` for the whole run;
then the reference twice (the noise floor) and the pressured deployment once, every token compared.

``--server vllm`` runs the same steps on two vLLM servers (:mod:`kvdoctor.consistency.deploy_vllm`): vLLM's
completions API (``client.vllm_api``), preemptions from ``vllm:num_preemptions_total``
(:mod:`kvdoctor.consistency.probe_vllm`), faults from kvdoctor's vLLM plugin
(:mod:`kvdoctor.engines.vllm.server_plugin`), counted from its log. ``--scenario prefix-cache``
(:mod:`kvdoctor.consistency.prefix`) sends its phases in order to each server instead of one burst, and proves
the subject's prefix-cache hits from ``vllm:prefix_cache_hits_total`` in place of preemptions. ``--scenario
offload`` is preempt's run with the OffloadingConnector on the pressured server: its loads from the CPU tier
(``vllm:kv_offload_load_bytes``) are proven beside the preemptions (:func:`kvdoctor.consistency.gates.offload`).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvdoctor._exceptions import (
    EXIT_DEPLOYMENT,
    EXIT_GATE,
    EXIT_INTERNAL,
    EXIT_PASS,
    DeploymentError,
    InputError,
    Interrupted,
)
from kvdoctor.consistency import (
    attribution,
    checkpoint,
    compare,
    context_limit,
    deploy,
    deploy_vllm,
    footprint,
    gates,
    prefix,
    runnable,
)
from kvdoctor.consistency.client import SGLANG_API, generate_all, vllm_api
from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.probe_vllm import (
    OffloadCount,
    OffloadProbe,
    PreemptionProbe,
    PrefixCacheCount,
    PrefixCacheProbe,
)
from kvdoctor.consistency.result import (
    Burst,
    ConsistencyResult,
    FaultReport,
    OffloadResult,
    PrefixCacheResult,
    Stopwatch,
)
from kvdoctor.consistency.shrink import shrink as shrink_config
from kvdoctor.consistency.workload import Workload, prompts
from kvdoctor.engines.vllm.server_plugin import OFFLOAD_FAULTS, PREFIX_FAULTS
from kvdoctor.pd import ports as pd_ports
from kvdoctor.pd import rundir
from kvdoctor.pd.deadline import Deadline
from kvdoctor.pd.metrics import RetractionProbe
from kvdoctor.pd.signals import SignalLatch, signals_raise
from kvdoctor.pd.supervisor import Supervisor

STANDIN_LOG = "stand-in-calls.log"
HOOK_LOG = "site-hook.log"
PROBE_TIMEOUT_S = 10.0
MAX_UNSHRUNK_HIDDEN = 1024  # a random checkpoint of a config wider than this is too big to write
SERVERS = ("sglang", "vllm")
WARM_UP_TOKENS = 4  # new tokens of the warm-up request (at most the workload's own)
CUDA_PROBE_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class ConsistencyOptions:
    model: str
    shrink: bool = False
    topology: str = "single"
    device: str = "cpu"
    inject: str | None = None
    workload: Workload = field(default_factory=Workload)
    output_dir: Path = Path("kvdoctor-out/consistency")
    host: str = "127.0.0.1"
    timeout_s: float = 1800.0
    request_timeout_s: float = 600.0
    grace_s: float = 10.0
    extra_args: tuple[str, ...] = ()
    junit_path: Path | None = None
    plan: deploy.PlanChoices | None = None  # pd-eval --oracle tokens: its deployment (pd only); None: consistency's
    server: str = "sglang"  # whose servers run: sglang, or vllm (single only)
    scenario: str = prefix.PREEMPT  # preempt, prefix-cache or offload (vllm only)


@dataclass
class Prepared:
    options: ConsistencyOptions
    config: dict[str, Any]
    kind: runnable.ModelKind
    real_weights: Path | None  # a model directory with its own safetensors (used as is)
    stand_in: bool
    vocab_size: int
    prompts: list[list[int]] = field(default_factory=list)
    source: str = ""  # where the config came from (the vLLM pool sizing parses it again)
    prefix: prefix.PrefixWorkload | None = None  # --scenario prefix-cache: its phases (prompts are the compared)


def _has_weights(model: str) -> Path | None:
    path = Path(model).expanduser()
    return path if path.is_dir() and any(path.glob("*.safetensors")) else None


def stand_in_needed(device: str) -> bool:
    """The stand-in goes on the servers' path only on CPU and only when no real sgl_kernel is installed."""
    return device == "cpu" and importlib.util.find_spec("sgl_kernel") is None


def prepare(o: ConsistencyOptions) -> Prepared:
    """Everything decided before anything starts; ``InputError`` (exit 2) for what the user must fix. The counts
    are bounded (cheap arithmetic: the model's context, then what the plan and this machine hold) before a single
    prompt is generated."""
    from kvdoctor.core.config import load_config
    from kvdoctor.engines.sglang import live_faults

    o.workload.check()
    if o.server not in SERVERS:
        raise InputError(f"--server must be one of {', '.join(SERVERS)}, got {o.server!r}")
    prefix.check(o.scenario, o.server)
    if o.server == "vllm":
        return _prepare_vllm(o)
    for name, value in (("--timeout", o.timeout_s), ("--request-timeout", o.request_timeout_s)):
        if not value > 0:
            raise InputError(f"{name} must be > 0 seconds, got {value}")
    if o.topology not in deploy.TOPOLOGIES:
        raise InputError(f"--topology must be one of {', '.join(deploy.TOPOLOGIES)}, got {o.topology!r}")
    if o.device not in deploy.DEVICES:
        raise InputError(f"--device must be one of {', '.join(deploy.DEVICES)}, got {o.device!r}")
    deploy.check_extra_args(o.extra_args)
    loaded = load_config(o.model)
    top = dict(loaded.top)
    kind = runnable.classify(top, loaded.source)
    if o.device == "cpu":
        runnable.check_cpu(kind, o.model)
    weights = None if o.shrink else _has_weights(o.model)
    config = shrink_config(top) if o.shrink else top
    if o.inject:
        live_faults.check(o.inject, has_recurrent=kind.has_recurrent, has_swa=kind.has_swa)
        if o.topology != "pd":
            deploy.build(_deploy_options(o, kind, "<model>", False, {}), [0] * 6)  # raises the InputError
    vocab = _vocab(o, config, weights, loaded.source)
    checkpoint.check_buildable(config, has_weights=weights is not None)  # before any work: exit 2, not 4
    w = o.workload
    context_limit.check(context_limit.sglang(config, str(loaded.source), o.extra_args), *_request(w), "sglang")
    prepared = Prepared(o, config, kind, weights, stand_in_needed(o.device), vocab, [], str(loaded.source))
    check_footprint(prepared, plan_for(prepared, "<model>", None))
    prepared.prompts = prompts(w, vocab)
    return prepared


def _request(w: Workload) -> tuple[int, int]:
    return w.prompt_tokens, w.max_new_tokens


def _vocab(o: ConsistencyOptions, config: dict[str, Any], weights: Path | None, source: object) -> int:
    """The vocabulary prompt token ids are drawn from; a big model without weights must be shrunk (both servers)."""
    vocab = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    if not isinstance(vocab, int):
        raise InputError(f"{source}: no integer vocab_size to draw prompt token ids from")
    hidden = config.get("hidden_size") or (config.get("text_config") or {}).get("hidden_size") or 0
    if weights is None and not o.shrink and int(hidden) > MAX_UNSHRUNK_HIDDEN:
        raise InputError(
            f"{o.model} has no weights here (no *.safetensors) and hidden_size {hidden}: pass --shrink for a tiny "
            "seeded random checkpoint, or a model directory with its weights"
        )
    return vocab


def footprint_of(prepared: Prepared, deployment: deploy.Deployment) -> footprint.Footprint:
    """What the run will hold (:mod:`kvdoctor.consistency.footprint`): the checkpoint it must build (none when the
    model directory brings its weights or the cache holds it), every server of DEPLOYMENT with its pool, and
    kvdoctor's prompts and replies (a prefix-cache run's eviction phase included)."""
    o = prepared.options
    w = o.workload
    cache = checkpoint.cache_dir(o.output_dir, prepared.config, w.seed)
    loaded = prepared.real_weights or (cache if (cache / checkpoint.DIGEST_FILE).is_file() else None)
    weights = footprint.safetensors_weights(loaded) if loaded is not None else None
    servers = [footprint.Server(s.role, _pool_of(deployment, s.role)) for s in deployment.steps]
    requests = w.requests
    if prepared.prefix is not None:
        requests += sum(len(ph.prompts) for ph in prepared.prefix.phases if not ph.compared)
    return footprint.estimate(
        prepared.config,
        servers,
        weights=weights,
        build=weights is None,
        device=o.device,
        requests=requests,
        prompt_tokens=w.prompt_tokens + (prepared.prefix.prefix_tokens if prepared.prefix is not None else 0),
        max_new_tokens=w.max_new_tokens,
    )


def _pool_of(deployment: deploy.Deployment, role: str) -> int:
    """The pool tokens ROLE's server holds: a router none, the pressured server (or decode) the tight pool, every
    other server (reference, its decode, the shared prefill) the roomy one."""
    if role.startswith("router"):
        return 0
    return deployment.pressured_pool if role.endswith("pressured") else deployment.reference_pool


def check_footprint(prepared: Prepared, deployment: deploy.Deployment) -> None:
    """Refuse (exit 2, the numbers) a run this machine cannot hold: connections, memory, disk."""
    o = prepared.options
    footprint.check_connections(o.workload.in_flight, footprint.open_files())
    hint = ""
    if prepared.real_weights is None and not o.shrink:
        hint = ": pass --shrink for a tiny seeded random checkpoint, or a model directory with its weights"
    elif o.shrink:
        hint = ": lower --requests, --concurrency, --prompt-tokens or --max-new-tokens"
    footprint.check(
        footprint_of(prepared, deployment),
        memory=footprint.available_memory(),
        disk=footprint.free_disk(o.output_dir),
        output_dir=o.output_dir,
        hint=hint,
    )


def _prepare_vllm(o: ConsistencyOptions) -> Prepared:
    """``--server vllm``: the same checks where they are the server's, vLLM's own where they differ."""
    from kvdoctor.core.config import load_config

    for name, value in (("--timeout", o.timeout_s), ("--request-timeout", o.request_timeout_s)):
        if not value > 0:
            raise InputError(f"{name} must be > 0 seconds, got {value}")
    if o.topology != "single":
        raise InputError(
            f"--server vllm runs --topology single only, got {o.topology!r}: vLLM's PD (a KV connector) is not "
            "part of kvdoctor consistency; vLLM preempts by recompute on one server"
        )
    if o.plan is not None:
        raise InputError("a PD deployment's choices (pd-eval --oracle tokens) are SGLang's; --server vllm has none")
    if o.device not in deploy.DEVICES:
        raise InputError(f"--device must be one of {', '.join(deploy.DEVICES)}, got {o.device!r}")
    deploy_vllm.check_extra_args(o.extra_args)
    loaded = load_config(o.model)
    top = dict(loaded.top)
    kind = runnable.classify(top, loaded.source)
    weights = None if o.shrink else _has_weights(o.model)
    config = shrink_config(top, server="vllm") if o.shrink else top
    if o.inject:
        deploy_vllm.check_fault(o.inject, has_recurrent=kind.has_recurrent, scenario=o.scenario)
    vocab = _vocab(o, config, weights, loaded.source)
    checkpoint.check_buildable(config, has_weights=weights is not None)  # before any work: exit 2, not 4
    prepared = Prepared(o, config, kind, weights, False, vocab, [], loaded.source)
    planned = _vllm_options(prepared, "<model>", None)
    deploy_vllm.check_scenario(planned)
    w, served = o.workload, deploy_vllm.served(planned)
    limit = context_limit.vllm(config, str(loaded.source), o.extra_args)
    context_limit.check(limit, *_request(w), "vllm", served.prompt_tokens - w.prompt_tokens)
    own = deploy_vllm.model_len(served)
    context_limit.check_own_vllm(limit, own, served.per_request_tokens, o.extra_args)
    sized = deploy_vllm.pools(planned)  # the sizing's refusals, before anything starts
    if o.scenario == prefix.PREFIX_CACHE:
        evict = prefix.evict_requests(w, sized.block_size, sized.pressured_blocks)
        check_footprint_counts(prepared, requests=w.requests + evict, prompt_tokens=served.prompt_tokens)
        prepared.prefix = prefix.build(w, vocab, sized.block_size, sized.pressured_blocks)
        check_footprint(prepared, plan_for(prepared, "<model>", None))
        prepared.prompts = prepared.prefix.compared
    else:
        check_footprint(prepared, plan_for(prepared, "<model>", None))
        prepared.prompts = prompts(w, vocab)
    return prepared


def check_footprint_counts(prepared: Prepared, *, requests: int, prompt_tokens: int) -> None:
    """kvdoctor's own share alone (prompts and replies), before a workload's prompts are built."""
    w = prepared.options.workload
    need = footprint.client_bytes(requests, prompt_tokens, w.max_new_tokens)
    memory = footprint.available_memory()
    if need > memory:
        raise InputError(
            f"{requests:,} prompts of {prompt_tokens:,} tokens with {w.max_new_tokens:,} new tokens each would hold "
            f"~{footprint.gib(need)} in kvdoctor alone, and {footprint.gib(memory)} is available "
            f"({footprint.MEMORY_WHERE}): lower --requests, --prompt-tokens or --max-new-tokens"
        )


def _vllm_options(prepared: Prepared, model_dir: str, plugin_log: str | None) -> deploy_vllm.VllmDeployOptions:
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


def _deploy_options(
    o: ConsistencyOptions,
    kind: runnable.ModelKind,
    model_dir: str,
    stand_in: bool,
    log_env: dict[str, str],
    digest_log: str | None = None,
) -> deploy.DeployOptions:
    from kvdoctor.engines.sglang.cpu_shims import SHIM_DIR

    hook = Path(SHIM_DIR).parent / "site_hook"
    needs_hook = o.inject is not None or o.topology == "pd"  # pd: the pressured decode records its state trace
    return deploy.DeployOptions(
        model_dir=model_dir,
        topology=o.topology,
        device=o.device,
        workload=o.workload,
        has_recurrent=kind.has_recurrent,
        host=o.host,
        extra_args=o.extra_args,
        inject=o.inject,
        stand_in_dir=str(SHIM_DIR) if stand_in else None,
        site_hook_dir=str(hook) if needs_hook else None,
        inherited_pythonpath=os.environ.get("PYTHONPATH", ""),
        log_env=log_env,
        digest_log=digest_log if o.topology == "pd" else None,
        choices=o.plan,
    )


def plan_for(prepared: Prepared, model_dir: str, run_dir: Path | None) -> deploy.Deployment:
    o = prepared.options
    base = run_dir if run_dir is not None else Path("<run-dir>")
    if o.server == "vllm":
        free = pd_ports.free_ports(2, host=o.host) if run_dir is not None else [30000, 30001]
        return deploy_vllm.build(_vllm_options(prepared, model_dir, str(base / deploy_vllm.PLUGIN_LOG)), free)
    log_env = {"KVDOCTOR_STANDIN_LOG": str(base / STANDIN_LOG), "KVDOCTOR_HOOK_LOG": str(base / HOOK_LOG)}
    count = deploy.ports_needed(o.topology, o.plan)
    free = pd_ports.free_ports(count, host=o.host) if run_dir is not None else list(range(30000, 30000 + count))
    digest_log = str(base / attribution.DIGEST_LOG)
    return deploy.build(_deploy_options(o, prepared.kind, model_dir, prepared.stand_in, log_env, digest_log), free)


Notify = Callable[[str, str], None]


def preflight(prepared: Prepared) -> None:
    """What only a real run needs of this machine, checked before its run directory exists (a dry run of a GPU plan
    on a CPU box still prints it): ``--device cuda`` needs CUDA where the servers run (:func:`check_cuda`)."""
    if prepared.options.device == "cuda":
        check_cuda()


def check_cuda(python: str = "python") -> None:
    """``--device cuda`` without CUDA: both servers would die at start-up after the checkpoint was built (exit 3);
    exit 2 before any work. First torch-free: no NVIDIA device node (``/dev/nvidia*``, WSL's ``/dev/dxg``) or
    ``CUDA_VISIBLE_DEVICES`` hiding every device means no server can see a GPU, whatever it imports. With a device
    node, the servers' own interpreter (PYTHON from PATH: the launchers' ``python -m ...``, not necessarily kvdoctor's)
    answers ``torch.cuda.is_available()``: a driver without a CUDA build of torch (this repository's CPU install)
    is what kills them. That costs an import of torch in a child, only on a machine with a GPU driver."""
    import glob
    import shutil
    import subprocess

    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and hidden.strip() in ("", "-1"):
        raise InputError(f"--device cuda: CUDA_VISIBLE_DEVICES={hidden!r} hides every GPU from the servers")
    if not (glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/dxg")):
        raise InputError(
            "--device cuda: this machine has no NVIDIA GPU (no /dev/nvidia0 device node); use --device cpu"
        )
    exe = shutil.which(python)
    if exe is None:
        raise InputError(f"--device cuda: no {python!r} on PATH to run the servers")
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)"
    try:
        done = subprocess.run(
            [exe, "-c", probe], capture_output=True, text=True, timeout=CUDA_PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError(f"--device cuda: cannot ask {exe} whether torch sees CUDA: {exc}") from None
    if done.returncode != 0:
        why = (
            "torch.cuda.is_available() is False"
            if done.returncode == 3
            else (done.stderr.strip().splitlines() or ["torch does not import"])[-1]
        )
        raise InputError(f"--device cuda: the servers' interpreter {exe} cannot use CUDA ({why}); use --device cpu")


def run(prepared: Prepared, *, notify: Notify | None = None) -> ConsistencyResult:
    """Build or reuse the checkpoint, deploy, send, compare, tear down. Never raises for deployment trouble (exit 3)
    or a kvdoctor bug there (exit 4, ``internal_error``: the result is still returned, for result.json); raises
    ``InputError`` only before the run directory exists (:func:`preflight`)."""
    say = notify or (lambda _phase, _msg: None)
    o = prepared.options
    kind = PrefixCacheResult if prepared.prefix is not None else ConsistencyResult
    result = (OffloadResult if o.scenario == prefix.OFFLOAD else kind)(
        model=o.model,
        family=prepared.kind.family,
        topology=o.topology,
        device=o.device,
        shrunk=o.shrink,
        workload=o.workload.to_dict(),
        server=o.server,
    )
    watch = Stopwatch()  # every timing the run reports is read from this one clock (result.timeline)
    result.timeline = watch.timeline
    preflight(prepared)
    run_dir = rundir.create(o.output_dir)
    result.run_dir = str(run_dir)
    say("prepare", f"run directory: {run_dir}")
    if prepared.real_weights is not None:
        model_dir = str(prepared.real_weights)
        result.weights_digest = checkpoint.weights_digest(prepared.real_weights)
    else:
        say("checkpoint", "writing (or reusing) the seeded random checkpoint")
        ckpt = checkpoint.ensure(prepared.config, o.workload.seed, o.output_dir)
        model_dir = str(ckpt.path)
        result.checkpoint = ckpt.to_dict()
        result.weights_digest = ckpt.weights_digest
        how = "reused" if ckpt.cached else f"built in {ckpt.build_s:.1f} s"
        say("checkpoint", f"{ckpt.path} ({how}); weights sha256 {ckpt.weights_digest[:16]}…")
    result.model_dir = model_dir
    deployment = plan_for(prepared, model_dir, run_dir)
    result.deployment = deployment.to_dict()
    result.cpu_enablers = [{"name": e.name, "where": e.where, "why": e.why} for e in deployment.enablers]
    result.stand_in = {"used": prepared.stand_in, "log": str(run_dir / STANDIN_LOG), "calls": []}
    if o.inject:
        result.fault = FaultReport(o.inject, deployment.injected_role or "")
    watch.record("prepare", 0.0)
    deadline = Deadline(o.timeout_s)
    supervisor: Supervisor | None = None
    try:
        with signals_raise() as latch, Supervisor(run_dir, grace_s=o.grace_s, latch=latch) as supervisor:
            _deploy_and_compare(prepared, deployment, supervisor, latch, deadline, result, say, watch)
            teardown_from = watch.now()
        watch.record("teardown", teardown_from)
    except DeploymentError as exc:
        result.passed, result.exit_code = False, EXIT_DEPLOYMENT
        result.exit_reason = getattr(exc, "reason", "deployment_failed")
        result.message = str(exc)
    except (Interrupted, KeyboardInterrupt) as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else 2
        result.passed, result.exit_code, result.exit_reason = False, Interrupted.exit_code_for(signum), "interrupted"
        result.message = f"interrupted by {exc or 'SIGINT'}; every started process was stopped"
    except Exception as exc:  # a kvdoctor bug: CI must get result.json and exit 4 (the README's), never a traceback
        result.passed, result.exit_code, result.exit_reason = False, EXIT_INTERNAL, "internal_error"
        result.message = f"kvdoctor failed during the run: {type(exc).__name__}: {exc}"
    if supervisor is not None:
        result.warnings += supervisor.warnings  # inherited KVDOCTOR_* control variables it did not pass on
    if supervisor is not None and supervisor.survivors:
        result.survivors = list(supervisor.survivors)
        result.message += f"; still running after teardown (stop them by hand): {', '.join(supervisor.survivors)}"
        if result.exit_code in (EXIT_PASS, EXIT_GATE):
            result.passed, result.exit_code, result.exit_reason = False, EXIT_DEPLOYMENT, "processes_survived"
    with watch.phase("trace"):
        if o.server == "vllm":
            _read_plugin_log(run_dir, result)
        else:
            _read_hook_logs(run_dir, result)
        _trace(prepared, run_dir, result, say)
    result.wall_s = watch.now()
    return result


def _trace(prepared: Prepared, run_dir: Path, result: ConsistencyResult, say: Notify) -> None:
    """PD: join the pressured decode's state trace with the comparison; say why each diverging request did.
    Reported, not gated: the tokens and logprobs decide the verdict; the trace says where the state went wrong."""
    if prepared.options.topology != "pd" or not result.requests:
        return
    hook_path = run_dir / HOOK_LOG
    lines = hook_path.read_text(encoding="utf-8").splitlines() if hook_path.exists() else []
    failed = [line.split(" ", 2)[-1] for line in lines if line.split(" ", 2)[1:2] == ["digest-failed"]]
    trace = attribution.attribute(
        run_dir / attribution.DIGEST_LOG,
        prepared.prompts,
        result.requests,
        injected=prepared.options.inject,
        failure=failed[0] if failed else None,
        drifted=list((result.logprob_drift or {}).get("requests", [])),
        unrequested=attribution.unrequested_fault(lines, prepared.options.inject),
    )
    result.state_trace = trace.to_dict()
    for line in trace.lines():
        say("attribute", line)
    if not trace.complete:
        result.warnings.append(f"the state trace is incomplete ({trace.failure or 'see state_trace'})")


def _read_hook_logs(run_dir: Path, result: ConsistencyResult) -> None:
    """What the servers' stand-in and site hook recorded; a stand-in call or a refused fault turns the run red."""
    calls_path = run_dir / STANDIN_LOG
    calls = calls_path.read_text(encoding="utf-8").split("\n") if calls_path.exists() else []
    result.stand_in["calls"] = [c.split(" ", 1)[-1] for c in calls if c.strip()]
    hook_path = run_dir / HOOK_LOG
    events = (
        [line.split(" ", 2) for line in hook_path.read_text(encoding="utf-8").splitlines()]
        if hook_path.exists()
        else []
    )
    patched = sorted({e[2] for e in events if len(e) > 2 and e[1] == "patched"})
    result.stand_in["site_hook_patches"] = patched
    if result.fault is not None:
        f = result.fault
        f.installed = any(e[1] == "fault-installed" for e in events if len(e) > 1)
        f.backups = sum(e[1] == "fault-offload" for e in events if len(e) > 1)
        f.restores = sum(e[1] == "fault-restore" for e in events if len(e) > 1)
        refused = [e[2] for e in events if len(e) > 2 and e[1] == "fault-refused"]
        f.refused = refused[0] if refused else None
    failed = [" ".join(e[2:]) for e in events if len(e) > 1 and e[1] == "hook-failed"]
    if result.exit_code in (EXIT_PASS, EXIT_GATE):
        if result.stand_in["calls"]:
            gate = gates.stand_in(result.stand_in["calls"], True)
            result.gates = [g for g in result.gates if g.name != gate.name] + [gate]
        if failed:
            result.gates.append(
                gates.Gate("site-hook", False, "site_hook_failed", f"kvdoctor's site hook failed: {failed[0]}")
            )
        # first: what diverged is then the fault's, so the verdict's reason is the fault nobody asked for
        result.gates[:0] = attribution.unrequested_gates(map(" ".join, events), result.fault and result.fault.name)
        _settle(result)


def _read_plugin_log(run_dir: Path, result: ConsistencyResult) -> None:
    """What kvdoctor's vLLM plugin recorded: a fault asked for that never installed, never fired or failed is
    red (a fault run that hit nothing proves nothing)."""
    path = run_dir / deploy_vllm.PLUGIN_LOG
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    events = [line.split(" ", 2) for line in lines]
    names = [e[1] for e in events if len(e) > 1]
    result.stand_in["vllm_plugin"] = {"log": str(path), "loaded": names.count("loaded")}
    if result.fault is None:
        if result.exit_code in (EXIT_PASS, EXIT_GATE) and (stray := attribution.unrequested_gates(lines, None)):
            result.gates[:0] = stray  # first: a fault nobody asked for makes the verdict unknown
            _settle(result)
        return
    f = result.fault
    f.installed = "fault-installed" in names
    f.restores = names.count("fault-fired")  # resumed (or prefix-hit) requests whose state the fault zeroed
    failed = [e[2] for e in events if len(e) > 2 and e[1] in ("fault-failed", "fault-refused")]
    f.refused = failed[0] if failed else None
    if result.exit_code in (EXIT_PASS, EXIT_GATE):
        acts_on = gates.PREFIX_HIT if f.name in PREFIX_FAULTS else gates.RESUMED
        acts_on = gates.OFFLOAD_LOAD if f.name in OFFLOAD_FAULTS else acts_on
        result.gates.append(gates.fault_fired(f.name, f.installed, f.restores, f.refused, **acts_on))
        _settle(result)


def _settle(result: ConsistencyResult) -> None:
    failed = [g for g in result.gates if not g.passed]
    result.passed = not failed
    result.exit_code = EXIT_GATE if failed else EXIT_PASS
    result.exit_reason = failed[0].reason if failed else "passed"
    result.message = "; ".join(g.message for g in result.gates)


def _deploy_and_compare(
    prepared: Prepared,
    deployment: deploy.Deployment,
    supervisor: Supervisor,
    latch: SignalLatch,
    deadline: Deadline,
    result: ConsistencyResult,
    say: Notify,
    watch: Stopwatch,
) -> None:
    o = prepared.options
    api = vllm_api(deploy_vllm.SERVED_NAME) if o.server == "vllm" else SGLANG_API
    started: dict[str, tuple[Any, float]] = {}
    # Every process starts at once (start-up is mostly imports, which overlap), then each is waited for in
    # plan order: servers first, routers last (a mini-lb is ready only once its servers are).
    startup_from = watch.now()
    for step in deployment.steps:
        launched = watch.now()
        managed = supervisor.start(step.role, step.argv, step.env)
        result.logs[step.role] = str(managed.log_path)
        started[step.role] = (managed, launched)
        say("launch", f"{step.role}: started (pid {managed.pid}, log {managed.log_path})")
    for step in deployment.steps:
        managed, launched = started[step.role]
        say("launch", f"{step.role}: waiting until GET {step.url}{step.health_path} answers")
        supervisor.wait_healthy(managed, step.url + step.health_path, deadline.at)
        result.launch_s[step.role] = round(watch.server(step.role, launched).seconds, 1)
        say("launch", f"{step.role}: healthy after {result.launch_s[step.role]:.0f} s")
    watch.record("start-up", startup_from)
    watchdog = supervisor.check_alive

    def burst(
        name: str, url: str, work: list[list[int]], w: Workload, *, phase: bool = True
    ) -> tuple[list[Generation], Burst]:
        say("send", f"{name}: {len(work)} requests, {w.concurrency} in flight, {w.max_new_tokens} new tokens each")

        def send_one(work: list[list[int]], w: Workload, what: str) -> list[Generation]:
            with latch.deferred():
                return asyncio.run(
                    generate_all(
                        url,
                        work,
                        w,
                        request_timeout_s=o.request_timeout_s,
                        time_left_s=deadline.left(),
                        what=what,
                        watchdog=watchdog,
                        api=api,
                    )
                )

        def send() -> list[Generation]:
            if not phase or prepared.prefix is None:
                return send_one(work, w, f"the {name} run")
            compared: list[Generation] = []  # prefix-cache: each phase whole, in order; the compared ones kept
            for ph in prepared.prefix.phases:
                say("send", f"{name}: phase {ph.name}: {len(ph.prompts)} requests, {ph.max_new_tokens} new tokens each")
                gens = send_one([list(p) for p in ph.prompts], ph.workload(w), f"the {name} run's {ph.name} phase")
                compared += gens if ph.compared else []
            return compared

        gens, measured = timed_burst(watch, name, url, send, phase=phase)
        say(
            "send",
            f"{name}: {measured.output_tokens} tokens in {measured.wall_s:.1f} s ({measured.tokens_per_s:.0f} tok/s)",
        )
        return gens, measured

    def probe(url: str, role: str) -> RetractionProbe | PreemptionProbe:
        p = PreemptionProbe(url) if o.server == "vllm" else RetractionProbe(url, Path(result.logs[role]))
        deadline.call(lambda: p.start(deadline.request_timeout(PROBE_TIMEOUT_S)), what="/metrics", watchdog=watchdog)
        return p

    def finish(p: RetractionProbe | PreemptionProbe) -> tuple[int | None, str]:
        count = deadline.call(
            lambda: p.finish(deadline.request_timeout(PROBE_TIMEOUT_S)), what="/metrics", watchdog=watchdog
        )
        return count.value, count.source

    def prefix_probes(url: str) -> PrefixCacheProbe:
        p = PrefixCacheProbe(url)
        deadline.call(lambda: p.start(deadline.request_timeout(PROBE_TIMEOUT_S)), what="/metrics", watchdog=watchdog)
        return p

    def cache_finish(p: PrefixCacheProbe) -> PrefixCacheCount:
        return deadline.call(
            lambda: p.finish(deadline.request_timeout(PROBE_TIMEOUT_S)), what="/metrics", watchdog=watchdog
        )

    ref_role = "reference" if o.topology == "single" else "decode-reference"
    press_role = "pressured" if o.topology == "single" else "decode-pressured"
    warm, warm_prompts = warm_up(prepared)
    with watch.phase("warm-up"):
        for url in (deployment.reference_url, deployment.pressured_url):  # a router may answer /health, not route
            burst("warm-up", url, warm_prompts, warm, phase=False)

    def offload_probe(url: str) -> OffloadProbe | None:
        if o.scenario != prefix.OFFLOAD:
            return None
        p = OffloadProbe(url)
        deadline.call(lambda: p.start(deadline.request_timeout(PROBE_TIMEOUT_S)), what="/metrics", watchdog=watchdog)
        return p

    def offload_finish(p: OffloadProbe | None) -> OffloadCount | None:
        if p is None:
            return None
        return deadline.call(
            lambda: p.finish(deadline.request_timeout(PROBE_TIMEOUT_S)), what="/metrics", watchdog=watchdog
        )

    cache = prefix_probes(deployment.reference_metrics) if prepared.prefix is not None else None
    moved = offload_probe(deployment.reference_metrics)
    ref_probe = probe(deployment.reference_metrics, ref_role)
    ref1, b1 = burst("reference", deployment.reference_url, prepared.prompts, o.workload)
    ref2, b2 = burst("reference-repeat", deployment.reference_url, prepared.prompts, o.workload)
    ref_count, ref_source = finish(ref_probe)
    ref_cache = cache_finish(cache) if cache is not None else None
    ref_moved = offload_finish(moved)
    cache = prefix_probes(deployment.pressured_metrics) if prepared.prefix is not None else None
    moved = offload_probe(deployment.pressured_metrics)
    press_probe = probe(deployment.pressured_metrics, press_role)
    if o.topology == "pd" and result.run_dir:  # the trace's events from here on are the pressured burst's
        attribution.mark_burst(Path(result.run_dir) / attribution.DIGEST_LOG, "pressured", time.time())
    got, b3 = burst("pressured", deployment.pressured_url, prepared.prompts, o.workload)
    press_count, press_source = finish(press_probe)
    press_cache = cache_finish(cache) if cache is not None else None
    press_moved = offload_finish(moved)
    result.bursts = [b1, b2, b3]
    result.retractions = {"reference": ref_count, "pressured": press_count}
    result.retraction_source = press_source if press_source == ref_source else f"{ref_source}/{press_source}"
    noun = "preemptions" if o.server == "vllm" else "retractions"
    say("compare", f"{noun}: reference {ref_count}, pressured {press_count} (from {result.retraction_source})")
    if isinstance(result, PrefixCacheResult) and prepared.prefix is not None and ref_cache and press_cache:
        record_prefix_cache(result, prepared, ref_cache, press_cache, got)
        hits = result.prefix_cache["hits"]
        say("compare", f"prefix-cache hit tokens: reference {hits['reference']}, pressured {hits['pressured']}")
    if isinstance(result, OffloadResult) and ref_moved is not None and press_moved is not None:
        record_offload(result, prepared, ref_moved, press_moved)
        say("compare", f"bytes loaded from the CPU tier: pressured {press_moved.load_bytes} ({press_moved.source})")
    with watch.phase("compare"):
        evaluate(
            result,
            ref1,
            ref2,
            got,
            stand_in_used=prepared.stand_in,
            server=o.server,
            prefix_hits=(ref_cache, press_cache) if ref_cache and press_cache else None,
            offload_loads=(ref_moved, press_moved) if ref_moved and press_moved else None,
        )


def warm_up(prepared: Prepared) -> tuple[Workload, list[list[int]]]:
    """The one short request each server gets before the compared bursts (its first request pays start-up costs
    outside them); under ``--scenario prefix-cache`` it must cache no compared prompt's first block."""
    w = prepared.options.workload
    warm = Workload(1, w.prompt_tokens, min(WARM_UP_TOKENS, w.max_new_tokens), 1, w.seed)  # never past the context
    return warm, prompts(warm, prepared.vocab_size)[:1]


def record_prefix_cache(
    result: PrefixCacheResult,
    prepared: Prepared,
    reference: PrefixCacheCount,
    subject: PrefixCacheCount,
    got: list[Generation],
) -> None:
    """The prefix-cache evidence into RESULT: both servers' counters, the mamba cache modes, the subject's cached
    tokens per compared request and per phase, and a warning when the eviction wave evicted no prefix."""
    pw = prepared.prefix
    assert pw is not None
    opts = _vllm_options(prepared, "<model>", None)
    phases = pw.compared_phases
    cached = [g.cached_tokens for g in got]
    by_phase = prefix.cached_by_phase(phases, cached)
    again = [c for ph, c in zip(phases, cached, strict=True) if ph == "again" and c is not None]
    recomputed = sum(c < pw.prefix_tokens for c in again) if again else None
    served = {"reference": reference.config, deploy_vllm.SUBJECT: subject.config}
    modes: dict[str, str | None] = {}
    for role, config in served.items():  # vLLM's own word (cache_config_info) over kvdoctor's prediction
        predicted = deploy_vllm.mamba_cache_mode(opts, role)
        said = (config or {}).get("mamba_cache_mode")
        modes[role] = (said or predicted) if predicted is not None else None
        if predicted is not None and said is not None and said != predicted:
            result.warnings.append(
                f"{role}: vLLM reports mamba_cache_mode {said!r}, kvdoctor predicted {predicted!r} "
                f"({deploy_vllm.MAMBA_CACHE_MODE_WHERE})"
            )
    result.prefix_cache = {
        "workload": pw.to_dict(),
        "hits": {"reference": reference.hits, "pressured": subject.hits},
        "queries": {"reference": reference.queries, "pressured": subject.queries},
        "source": subject.source if subject.source == reference.source else f"{reference.source}/{subject.source}",
        "mamba_cache_mode": modes,
        "server_cache_config": served,
        "request_phases": phases,
        "cached_tokens": cached,
        "by_phase": by_phase,
        "recomputed_after_eviction": recomputed,
    }
    if recomputed == 0:
        result.warnings.append(
            "the eviction wave evicted no prefix: every request after it read its whole prefix from the cache"
        )
    unknown = sum(c is None for ph, c in zip(phases, cached, strict=True) if ph == "hit")
    if not any(c is not None for c in cached):
        result.warnings.append(
            "vLLM's replies carried no usage.prompt_tokens_details: per-request hits unknown (that every hit-phase "
            "request hit is not gated)"
        )
    elif unknown:
        result.warnings.append(
            f"{unknown} hit-phase request(s) carried no usage.prompt_tokens_details: that every hit-phase request "
            "hit is not gated"
        )


def record_offload(result: OffloadResult, prepared: Prepared, reference: OffloadCount, subject: OffloadCount) -> None:
    """The OffloadingConnector's evidence into RESULT: the pressured server's CPU tier and both servers' counters."""
    opts = _vllm_options(prepared, "<model>", None)
    per_request, tier = deploy_vllm.offload_bytes(opts)
    rows = {"reference": reference.to_dict(), "pressured": subject.to_dict()}
    result.offload = {
        "kv_offloading_size_gib": float(deploy_vllm.offload_gib(opts)),
        "cpu_tier_bytes": int(tier),
        "request_bytes": per_request,
        **{key: {role: row[key] for role, row in rows.items()} for key in subject.to_dict()},
        "source": subject.source if subject.source == reference.source else f"{reference.source}/{subject.source}",
    }


def _hit_phase(evidence: dict[str, Any]) -> dict[str, int | None] | None:
    """The hit phase's requests and those that read cached tokens, when the subject said it for every one."""
    rows = zip(evidence.get("request_phases") or [], evidence.get("cached_tokens") or [], strict=False)
    hit = [c for ph, c in rows if ph == "hit"]
    if not hit or any(c is None for c in hit):
        return None
    return {"requests": len(hit), "hit_requests": sum(c > 0 for c in hit)}


def timed_burst(
    watch: Stopwatch, name: str, url: str, send: Callable[[], list[Generation]], *, phase: bool = True
) -> tuple[list[Generation], Burst]:
    """SEND the whole workload once, timed on the run's clock: its generations and its :class:`Burst` (wall,
    output tokens, tok/s, start and end), and, when PHASE, its span in the timeline (warm-ups are not one)."""
    t0 = watch.now()
    gens = send()
    t1 = watch.now()
    wall = t1 - t0
    out = sum(len(g.tokens) for g in gens)
    measured = Burst(
        name,
        url,
        round(wall, 2),
        out,
        round(out / wall, 1) if wall > 0 else 0.0,
        compare.median_distinct(gens),
        compare.median_length(gens),
        start_s=round(t0, 3),
        end_s=round(t1, 3),
    )
    if phase:
        watch.record(name, t0, t1, out)
    return gens, measured


def evaluate(
    result: ConsistencyResult,
    ref: list[Generation],
    repeat: list[Generation],
    got: list[Generation],
    *,
    stand_in_used: bool,
    server: str = "sglang",
    prefix_hits: tuple[PrefixCacheCount, PrefixCacheCount] | None = None,
    offload_loads: tuple[OffloadCount, OffloadCount] | None = None,
) -> None:
    """Compare, then set the gates and the outcome (pure: the unit tests drive it with made-up runs).
    PREFIX_HITS (reference, subject): ``--scenario prefix-cache``'s counts, whose gate takes the pressure
    gate's place (nothing must preempt there; the subject's prefix cache must serve tokens). OFFLOAD_LOADS
    (reference, subject): ``--scenario offload``'s counts, whose gate stands beside the pressure gate."""
    floor = compare.noise_floor(ref, repeat)
    diffs = compare.against(ref, got, floor)
    result.noise_floor = {**floor.to_dict(), "sentence": floor.sentence()}
    result.requests = diffs
    result.total = len(diffs)
    result.identical = sum(not d.diverged for d in diffs)
    if isinstance(result, PrefixCacheResult):
        ref_hits, subject_hits = prefix_hits or (PrefixCacheCount(None, None, "none"),) * 2
        source = subject_hits.source if subject_hits.source == ref_hits.source else "none"
        evidence = gates.prefix_hits(subject_hits.hits, ref_hits.hits, source, _hit_phase(result.prefix_cache))
    else:
        evidence = gates.pressure(
            result.retractions.get("pressured"),
            result.retractions.get("reference"),
            result.retraction_source,
            **(gates.VLLM_PRESSURE if server == "vllm" else {}),
        )
    result.gates = [
        gates.tokens(diffs, floor),
        evidence,
        gates.sensitivity(compare.median_distinct(ref), compare.median_length(ref)),
        gates.noise(floor),
        gates.stand_in(result.stand_in.get("calls", []), stand_in_used),
    ]
    if isinstance(result, OffloadResult):  # beside the pressure gate: the resumed requests' blocks came from the CPU
        ref_moved, moved = offload_loads or (OffloadCount(None, None, None, None, "none"),) * 2
        result.gates.insert(2, gates.offload(moved.load_bytes, ref_moved.load_bytes, moved.source, moved.store_bytes))
    result.logprob_drift = compare.drift(diffs, floor)
    result.gates.insert(1, gates.logprobs(result.logprob_drift, len(diffs), floor.max_abs_dlogprob))
    _settle(result)
