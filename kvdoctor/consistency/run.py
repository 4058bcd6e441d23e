"""One consistency run, end to end, on the deployment floor (``kvdoctor.deploy``), the same for every server.

prepare (the shared checks, then the server's own: config → runnable? → shrink → workload → options; nothing
starts) → run: a fresh run directory (``kvdoctor.deploy.rundir``), the seeded checkpoint (cached), the server's
plan, every process under one ``kvdoctor.deploy.supervisor.Supervisor`` (new sessions, subreaper, teardown on every
path), health through ``wait_healthy``, one ``kvdoctor.deploy.deadline.Deadline`` for the whole run; then the
reference twice (the noise floor) and the pressured deployment once, each between the server's probes, every token
compared; last, what the in-server hooks logged. Whatever differs by server (its checks, plan, client API, probes,
scenario evidence, in-server log, faults) is its room's, behind :class:`kvdoctor.consistency.servers.Deployment`;
whatever differs by scenario (its result, the gates proving its path ran) is its behaviour object's, one line of
:data:`kvdoctor.consistency.scenarios.SCENARIOS`: nothing here names a scenario or a server.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
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
from kvdoctor.consistency import bundle, checkpoint, compare, deploy, fault_file, gates, runnable, scenarios, servers
from kvdoctor.consistency.case import Case
from kvdoctor.consistency.client import generate_all
from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.prepared import STANDIN_LOG, ConsistencyOptions, Prepared, has_weights, vocab, warm_up
from kvdoctor.consistency.result import Burst, ConsistencyResult, FaultReport, Result, Stopwatch, settled
from kvdoctor.consistency.workload import Workload
from kvdoctor.core import faults as registry
from kvdoctor.core.config import load_config
from kvdoctor.core.faults import Target
from kvdoctor.core.servers import facts
from kvdoctor.deploy import rundir
from kvdoctor.deploy.deadline import Deadline
from kvdoctor.deploy.signals import SignalLatch, signals_raise
from kvdoctor.deploy.supervisor import Supervisor
from kvdoctor.engines import arming, fault_list

__all__ = [
    "Case",
    "ConsistencyOptions",
    "Prepared",
    "check_cases",
    "evaluate",
    "plan_for",
    "prepare",
    "run",
    "run_cases",
    "timed_burst",
    "warm_up",
]

PROBE_TIMEOUT_S = 10.0
RESET_TIMEOUT_S = 60.0  # the subject finishing its last requests, then emptying its caches
REFERENCE, PRESSURED = "reference", "pressured"  # the measured bursts' names (a case's: pressured:<case>)
REFERENCE_BURSTS = (REFERENCE,)  # the reference's burst and its repeat follow one ``case reference`` line
CUDA_PROBE_TIMEOUT_S = 120.0
Notify = Callable[[str, str], None]


def prepare(o: ConsistencyOptions) -> Prepared:
    """Everything decided before anything starts; ``InputError`` (exit 2) for what the user must fix. The counts
    are bounded (cheap arithmetic: the model's context, then what the plan and this machine hold) before a single
    prompt is generated. The shared checks here; the server's own through its room."""
    o.workload.check()
    server = servers.deployment(o.server)
    scenarios.check(o.scenario, o.server, servers.scenarios())
    for name, value in (("--timeout", o.timeout_s), ("--request-timeout", o.request_timeout_s)):
        if not value > 0:
            raise InputError(f"{name} must be > 0 seconds, got {value}")
    server.check(o)
    if o.device not in deploy.DEVICES:
        raise InputError(f"--device must be one of {', '.join(deploy.DEVICES)}, got {o.device!r}")
    server.check_extra_args((*o.extra_args, *o.subject_args))
    loaded = load_config(o.model)
    top = dict(loaded.top)
    kind = runnable.classify(top, loaded.source)
    server.check_model(o, kind)
    weights = None if o.shrink else has_weights(o.model)
    config = server.shrink(top) if o.shrink else top
    fault_file.check(o)  # --fault-file: the user's own fault (exit 2 for one this run cannot use, or with --inject)
    if o.inject:
        server.check_fault(o, kind)
    size = vocab(o, config, weights, loaded.source)
    checkpoint.check_buildable(config, has_weights=weights is not None)  # before any work: exit 2, not 4
    prepared = Prepared(o, config, kind, weights, server.stand_in(o.device), size, [], str(loaded.source))
    return server.bound(prepared)


def plan_for(prepared: Prepared, model_dir: str, run_dir: Path | None) -> deploy.Deployment:
    """The server's plan: both deployments on free ports (placeholder ports and run directory without RUN_DIR)."""
    return servers.deployment(prepared.options.server).plan(prepared, model_dir, run_dir)


def preflight(prepared: Prepared) -> None:
    """What only a real run needs of this machine, checked before its run directory exists (a dry run of a GPU plan
    on a CPU box still prints it): ``--device cuda`` needs CUDA where the servers run (:func:`check_cuda`); the server
    (and ``--shrink``'s checkpoint writer) must be importable in this interpreter, which launches them (exit 2
    naming the environment to build, not a server dead at start-up or an internal error after the run directory)."""
    if prepared.options.device == "cuda":
        check_cuda()
    servers.deployment(prepared.options.server).require_environment(prepared.options)


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
    (result,) = run_cases(prepared, (Case(PRESSURED, prepared.options.inject),), notify=notify)
    return result


def check_cases(prepared: Prepared, cases: Sequence[Case]) -> None:
    """CASES on one deployment, or ``InputError`` (exit 2): named apart, each fault one the server installs on this
    model and plan, and (more than one case) each switchable at run time, on a server whose plan arms faults."""
    if not cases or len({c.name for c in cases}) != len(cases):
        raise InputError(f"a run needs one or more cases with distinct names, got {[c.name for c in cases]}")
    o = prepared.options
    server = servers.deployment(o.server)
    for case in cases:
        if case.fault is None:
            continue
        server.check_fault(replace(o, inject=case.fault), prepared.kind)
        if len(cases) > 1 and not registry.get(case.fault, server=o.server, target=Target.SERVER).switchable:
            raise InputError(f"fault {case.fault} cannot be switched at run time: it needs a launch of its own")
    if len(cases) > 1 and o.fault_file is not None:
        raise InputError("--fault-file is armed for the whole pressured burst: one case per launch")
    faults = fault_list.encode(c.fault for c in cases)
    planned = replace(prepared, options=replace(o, inject=faults))
    if len(cases) > 1 and server.plan(planned, "<model>", None).arm_file is None:
        raise InputError(f"--server {o.server} cannot arm faults at run time: one case per launch")


def run_cases(
    prepared: Prepared, cases: Sequence[Case], *, notify: Notify | None = None
) -> tuple[ConsistencyResult, ...]:
    """CASES on one deployment: the reference launched once and measured twice (the noise floor), the subject
    launched once with every case's fault installed, then per case (in order) the subject's caches reset (after the
    first), its fault armed (:mod:`kvdoctor.engines.arming`), one measured burst, compared, disarmed; one result per
    case, each with the in-server events of its own burst. :func:`run` is the one-case run (burst ``pressured``)."""
    say = notify or (lambda _phase, _msg: None)
    check_cases(prepared, cases)
    faults = fault_list.encode(c.fault for c in cases)
    prepared = replace(prepared, options=replace(prepared.options, inject=faults))
    server = servers.deployment(prepared.options.server)
    result = _Draft([_new_result(prepared) for _ in cases])
    watch = Stopwatch()  # every timing the run reports is read from this one clock (result.timeline)
    preflight(prepared)
    run_dir = rundir.create(prepared.options.output_dir)
    result.set(run_dir=str(run_dir))
    say("prepare", f"run directory: {run_dir}")
    model_dir = _checkpoint(prepared, result, say)
    deployment = server.plan(prepared, model_dir, run_dir)
    if deployment.arm_file is not None:  # every fault disarmed until its burst (warm-up included)
        arming.disarm(Path(deployment.arm_file))
    result.set(
        deployment=deployment.to_dict(),
        cpu_enablers=[{"name": e.name, "where": e.where, "why": e.why} for e in deployment.enablers],
        stand_in={"used": prepared.stand_in, "log": str(run_dir / STANDIN_LOG), "calls": []},
    )
    for i, case in enumerate(cases):
        report = FaultReport(case.fault, deployment.injected_role or "") if case.fault else None
        result.results[i] = replace(result.results[i], fault=report)
    watch.record("prepare", 0.0)
    _supervised(prepared, deployment, run_dir, result, say, watch, cases)
    with watch.phase("trace"):
        for i, case in enumerate(cases):
            bursts = None if len(cases) == 1 else (*REFERENCE_BURSTS, _burst_name(case, cases))
            result.results[i] = server.read_log(prepared, run_dir, result.results[i], say, bursts=bursts)
    if len(cases) == 1:
        result.results[0] = _bundle(prepared, deployment, run_dir, result, say)
    result.set(wall_s=watch.now(), timeline=watch.timeline)
    return tuple(result.results)


def _bundle(
    prepared: Prepared, deployment: deploy.Deployment, run_dir: Path, draft: _Draft, say: Notify
) -> ConsistencyResult:
    """A red run's reproduction bundle (:mod:`kvdoctor.consistency.bundle`) in the run directory and ``--bundle``;
    a run that gets none says why when ``--bundle`` asked for one. A bundle that cannot be written is a warning:
    the verdict stands. ``--bundle`` was checked before launch (``bundle.check_destination``); a copy there that
    still fails (the folder changed during the run) leaves the run directory's bundle, named in the warning."""
    r, o = draft.results[0], prepared.options
    tokens = draft.tokens.get(0)
    why = bundle.why_not(r, o.inject or fault_file.name(o))
    if why is not None or tokens is None:
        if o.bundle is not None:
            why = why or "no tokens were compared"
            say("bundle", f"--bundle {o.bundle}: not written: {why}")
        return r
    try:
        written = bundle.write(
            run_dir,
            r,
            deployment,
            prepared.prompts,
            tokens,
            workload=o.workload,
            extra_args=o.extra_args,
            copy_to=o.bundle,
        )
    except (OSError, InputError) as exc:
        say("bundle", f"not written: {exc}")
        return replace(r, warnings=[*r.warnings, f"the reproduction bundle was not written: {exc}"])
    say("bundle", written.reason)
    warnings = [*r.warnings, written.warning] if written.warning else r.warnings
    return replace(r, bundle=str(written.path), warnings=warnings)


def _burst_name(case: Case, cases: Sequence[Case]) -> str:
    """The measured burst of CASE: ``pressured`` alone (a one-case run), else ``pressured:<case>``."""
    return PRESSURED if len(cases) == 1 else f"{PRESSURED}:{case.name}"


class _Draft:
    """The run's results (one per case) while the run collects them. Each result is frozen: a phase sets fields
    (:meth:`set`: on every case before the cases run, then on the case being measured) or hands the current one to a
    step that returns a new one (``evaluate``, the server's evidence: :meth:`take`); a run that stops sets its
    outcome on the case it stopped in and every case after it (:meth:`fail`)."""

    def __init__(self, results: list[ConsistencyResult]) -> None:
        self.results = results
        self.case: int | None = None  # the case being measured (None: before or after the cases)
        self.finished = 0  # how many cases were measured and compared
        self.tokens: dict[int, tuple[list[Generation], list[Generation]]] = {}  # case -> (reference, its own)

    @property
    def result(self) -> ConsistencyResult:
        return self.results[self.case or 0]

    def _each(self, start: int | None) -> range:
        return range(len(self.results)) if start is None else range(start, start + 1)

    def set(self, **fields: Any) -> None:
        for i in self._each(self.case):
            self.results[i] = replace(self.results[i], **fields)

    def take(self, result: ConsistencyResult) -> None:
        self.results[self.case or 0] = result

    def fail(self, **fields: Any) -> None:
        done = min(self.finished, len(self.results) - 1)  # after the last case (teardown): that case's outcome
        for i in range(done, len(self.results)):
            self.results[i] = replace(self.results[i], **fields)


def _new_result(prepared: Prepared) -> ConsistencyResult:
    """The scenario's result record, before anything ran (``not_run``, exit 3 until the run says otherwise)."""
    o = prepared.options
    return scenarios.get(o.scenario).result_class(
        model=o.model,
        family=prepared.kind.family,
        topology=o.topology,
        device=o.device,
        shrunk=o.shrink,
        workload=o.workload.to_dict(),
        server=o.server,
    )


def _checkpoint(prepared: Prepared, result: _Draft, say: Notify) -> str:
    """The model directory every server loads: the model's own weights, or the seeded checkpoint (cached)."""
    o = prepared.options
    if prepared.real_weights is not None:
        model_dir = str(prepared.real_weights)
        result.set(weights_digest=checkpoint.weights_digest(prepared.real_weights))
    else:
        say("checkpoint", "writing (or reusing) the seeded random checkpoint")
        ckpt = checkpoint.ensure(prepared.config, o.workload.seed, o.output_dir)
        model_dir = str(ckpt.path)
        result.set(checkpoint=ckpt.to_dict(), weights_digest=ckpt.weights_digest)
        how = "reused" if ckpt.cached else f"built in {ckpt.build_s:.1f} s"
        say("checkpoint", f"{ckpt.path} ({how}); weights sha256 {ckpt.weights_digest[:16]}…")
    result.set(model_dir=model_dir)
    return model_dir


def _supervised(
    prepared: Prepared,
    deployment: deploy.Deployment,
    run_dir: Path,
    result: _Draft,
    say: Notify,
    watch: Stopwatch,
    cases: Sequence[Case],
) -> None:
    """Deploy and compare under one supervisor and one deadline; every way out is a result (3, 130/143, 4), set on
    the case it stopped in and every case after it."""
    o = prepared.options
    deadline = Deadline(o.timeout_s)
    supervisor: Supervisor | None = None
    try:
        with signals_raise() as latch, Supervisor(run_dir, grace_s=o.grace_s, latch=latch) as supervisor:
            _deploy_and_compare(prepared, deployment, supervisor, latch, deadline, result, say, watch, cases)
            teardown_from = watch.now()
        watch.record("teardown", teardown_from)
    except DeploymentError as exc:
        result.fail(
            passed=False,
            exit_code=EXIT_DEPLOYMENT,
            exit_reason=getattr(exc, "reason", "deployment_failed"),
            message=str(exc),
        )
    except (Interrupted, KeyboardInterrupt) as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else 2
        result.fail(passed=False, exit_code=Interrupted.exit_code_for(signum), exit_reason="interrupted")
        result.fail(message=f"interrupted by {exc or 'SIGINT'}; every started process was stopped")
    except Exception as exc:  # a kvdoctor bug: CI must get result.json and exit 4 (the README's), never a traceback
        result.fail(passed=False, exit_code=EXIT_INTERNAL, exit_reason="internal_error")
        result.fail(message=f"kvdoctor failed during the run: {type(exc).__name__}: {exc}")
    result.case = None
    if supervisor is not None:
        result.results = [_survivors(supervisor, r) for r in result.results]


def _survivors(supervisor: Supervisor, result: ConsistencyResult) -> ConsistencyResult:
    """What teardown left behind: its warnings, and any process still running (a pass becomes exit 3)."""
    # inherited KVDOCTOR_* control variables it did not pass on
    result = replace(result, warnings=[*result.warnings, *supervisor.warnings])
    if not supervisor.survivors:
        return result
    message = f"{result.message}; still running after teardown (stop them by hand): {', '.join(supervisor.survivors)}"
    result = replace(result, survivors=list(supervisor.survivors), message=message)
    if result.exit_code in (EXIT_PASS, EXIT_GATE):
        result = replace(result, passed=False, exit_code=EXIT_DEPLOYMENT, exit_reason="processes_survived")
    return result


@dataclass(frozen=True)
class _Session:
    """What every phase of one deploy-and-compare shares: the run's inputs, its server, supervisor and clocks."""

    prepared: Prepared
    server: servers.Deployment
    supervisor: Supervisor
    latch: SignalLatch
    deadline: Deadline
    say: Notify
    watch: Stopwatch
    run_dir: Path
    result: _Draft

    def metrics(self, call: Callable[[float], Any]) -> Any:
        """One ``/metrics`` request, capped by the run's deadline, stopped the moment a server dies."""
        return self.deadline.call(
            lambda: call(self.deadline.request_timeout(PROBE_TIMEOUT_S)),
            what="/metrics",
            watchdog=self.supervisor.check_alive,
        )


@dataclass(frozen=True)
class _Measured:
    """One deployment's measured bursts: their generations, timings, and what its probes counted."""

    generations: tuple[list[Generation], ...]
    bursts: tuple[Burst, ...]
    count: int | None
    source: str
    evidence: dict[str, Any]  # every other probe's finish, by the probe's name


def _deploy_and_compare(
    prepared: Prepared,
    deployment: deploy.Deployment,
    supervisor: Supervisor,
    latch: SignalLatch,
    deadline: Deadline,
    result: _Draft,
    say: Notify,
    watch: Stopwatch,
    cases: Sequence[Case],
) -> None:
    """The run's phases, in order: launch, warm up, measure the reference twice, then per case the pressured
    deployment once (each burst between its server's probes, the case's fault armed), compare."""
    server = servers.deployment(prepared.options.server)
    run_dir = Path(result.result.run_dir) if result.result.run_dir else Path(".")
    s = _Session(prepared, server, supervisor, latch, deadline, say, watch, run_dir, result)
    _launch(s, deployment)
    _warm_up(s, deployment)
    ref = _measure(s, deployment, REFERENCE, deployment.reference_url, deployment.reference_metrics, 2)
    for i, case in enumerate(cases):
        result.case = i
        if i:
            s.say("send", f"case {case.name}: resetting the subject's caches")
            s.deadline.call(  # the subject's server itself (PD: its decode), not a router that answers for it
                lambda url=deployment.pressured_metrics: server.reset(
                    prepared, url, s.deadline.request_timeout(RESET_TIMEOUT_S)
                ),
                what="the cache reset between cases",
                watchdog=s.supervisor.check_alive,
            )
        name = _burst_name(case, cases)
        with _armed(deployment, case.fault, fault_file.name(prepared.options)):
            press = _measure(s, deployment, name, deployment.pressured_url, deployment.pressured_metrics, 1)
        _compare(s, ref, press)
        result.finished = i + 1


@contextlib.contextmanager
def _armed(deployment: deploy.Deployment, *faults: str | None) -> Iterator[None]:
    """FAULTS armed inside the servers while the block runs (a fault on a server both deployments share, PD's
    prefill, fires for the pressured burst only), disarmed on every way out; nothing without an arm file."""
    if deployment.arm_file is None:
        yield
        return
    path = Path(deployment.arm_file)
    arming.arm(path, *(f for f in faults if f))
    try:
        yield
    finally:
        arming.disarm(path)


def _launch(s: _Session, deployment: deploy.Deployment) -> None:
    """Every process starts at once (start-up is mostly imports, which overlap), then each is waited for in plan
    order: servers first, routers last (a mini-lb is ready only once its servers are). Each log and each ready time
    goes into the result as it is known (a run that fails half-way still names every log)."""
    started: dict[str, tuple[Any, float]] = {}
    startup_from = s.watch.now()
    for step in deployment.steps:
        launched = s.watch.now()
        managed = s.supervisor.start(step.role, step.argv, step.env)
        s.result.set(logs={**s.result.result.logs, step.role: str(managed.log_path)})
        started[step.role] = (managed, launched)
        s.say("launch", f"{step.role}: started (pid {managed.pid}, log {managed.log_path})")
    for step in deployment.steps:
        managed, launched = started[step.role]
        s.say("launch", f"{step.role}: waiting until GET {step.url}{step.health_path} answers")
        s.supervisor.wait_healthy(managed, step.url + step.health_path, s.deadline.at)
        ready = round(s.watch.server(step.role, launched).seconds, 1)
        s.result.set(launch_s={**s.result.result.launch_s, step.role: ready})
        s.say("launch", f"{step.role}: healthy after {ready:.0f} s")
    s.watch.record("start-up", startup_from)


def _warm_up(s: _Session, deployment: deploy.Deployment) -> None:
    """One short request to each deployment, outside the measured bursts."""
    warm, warm_prompts = warm_up(s.prepared)
    with s.watch.phase("warm-up"):
        for url in (deployment.reference_url, deployment.pressured_url):  # a router may answer /health, not route
            _burst(s, "warm-up", url, warm_prompts, warm, phase=False)


def _send(s: _Session, url: str, work: list[list[int]], w: Workload, what: str) -> list[Generation]:
    """WORK to URL, W's concurrency in flight, a signal deferred until the event loop is closed."""
    o = s.prepared.options
    with s.latch.deferred():
        return asyncio.run(
            generate_all(
                url,
                work,
                w,
                request_timeout_s=o.request_timeout_s,
                time_left_s=s.deadline.left(),
                what=what,
                watchdog=s.supervisor.check_alive,
                api=s.server.api(),
            )
        )


def _burst(
    s: _Session, name: str, url: str, work: list[list[int]], w: Workload, *, phase: bool = True
) -> tuple[list[Generation], Burst]:
    """One timed send of WORK (a phased workload: each phase whole, in order, the compared ones kept)."""
    s.say("send", f"{name}: {len(work)} requests, {w.concurrency} in flight, {w.max_new_tokens} new tokens each")
    phased = s.prepared.prefix if phase else None

    def send() -> list[Generation]:
        if phased is None:
            return _send(s, url, work, w, f"the {name} run")
        compared: list[Generation] = []
        for ph in phased.phases:
            s.say("send", f"{name}: phase {ph.name}: {len(ph.prompts)} requests, {ph.max_new_tokens} new tokens each")
            gens = _send(s, url, [list(p) for p in ph.prompts], ph.workload(w), f"the {name} run's {ph.name} phase")
            compared += gens if ph.compared else []
        return compared

    gens, measured = timed_burst(s.watch, name, url, send, phase=phase)
    s.say(
        "send",
        f"{name}: {measured.output_tokens} tokens in {measured.wall_s:.1f} s ({measured.tokens_per_s:.0f} tok/s)",
    )
    return gens, measured


def _measure(
    s: _Session,
    deployment: deploy.Deployment,
    name: str,
    url: str,
    metrics: str,
    times: int,
) -> _Measured:
    """The compared prompts sent TIMES to the deployment at URL (the first named NAME, a repeat NAME-repeat),
    between the probes of the server whose ``/metrics`` is METRICS."""
    role = next(step.role for step in deployment.steps if step.url == metrics)
    probes = s.server.probes(s.prepared, metrics, Path(s.result.result.logs[role]))
    for probe in probes.values():
        s.metrics(probe.start)
    s.server.mark(s.prepared, s.run_dir, name)
    o = s.prepared.options
    sent = [_burst(s, name if i == 0 else f"{name}-repeat", url, s.prepared.prompts, o.workload) for i in range(times)]
    count = s.metrics(probes.pop("pressure").finish)
    evidence = {key: s.metrics(probe.finish) for key, probe in probes.items()}
    return _Measured(tuple(g for g, _ in sent), tuple(b for _, b in sent), count.value, count.source, evidence)


def _compare(s: _Session, ref: _Measured, press: _Measured) -> None:
    """Both deployments' counts and evidence into the result, then every token compared and the gates settled."""
    o = s.prepared.options
    source = press.source if press.source == ref.source else f"{ref.source}/{press.source}"
    s.result.set(
        bursts=[*ref.bursts, *press.bursts],
        retractions={"reference": ref.count, "pressured": press.count},
        retraction_source=source,
    )
    noun = facts(o.server).plural()
    s.say("compare", f"{noun}: reference {ref.count}, pressured {press.count} (from {source})")
    (got,) = press.generations
    s.result.tokens[s.result.case or 0] = (ref.generations[0], got)
    evidence = {"reference": ref.evidence, "pressured": press.evidence}
    recorded, found = s.server.record(s.result.result, s.prepared, evidence, got, s.say)
    s.result.take(recorded)
    with s.watch.phase("compare"):
        judged = evaluate(recorded, *ref.generations, got, stand_in_used=s.prepared.stand_in, server=o.server, **found)
    s.result.take(judged)


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
    result: Result,
    ref: list[Generation],
    repeat: list[Generation],
    got: list[Generation],
    *,
    stand_in_used: bool,
    server: str = "sglang",
    **evidence: Any,
) -> Result:
    """RESULT compared, with its gates and outcome (pure: the unit tests drive it with made-up runs; RESULT itself
    is left as it was). The gates proving the run's path ran are its scenario's (:meth:`kvdoctor.consistency.
    scenarios.Scenario.judge`, from RESULT and EVIDENCE: what the server's ``record`` found, by the scenario's keys,
    e.g. ``prefix_hits`` or ``offload_loads``), between the logprob gate and the sensitivity gate."""
    floor = compare.noise_floor(ref, repeat)
    diffs = compare.against(ref, got, floor)
    drift = compare.drift(diffs, floor)
    judged = [
        gates.tokens(diffs, floor),
        gates.logprobs(drift, len(diffs), floor.max_abs_dlogprob),
        *scenarios.of(result).judge(result, evidence, server),
        gates.sensitivity(compare.median_distinct(ref), compare.median_length(ref)),
        gates.noise(floor),
        gates.stand_in(result.stand_in.get("calls", []), stand_in_used),
    ]
    return settled(
        replace(
            result,
            noise_floor={**floor.to_dict(), "sentence": floor.sentence()},
            requests=diffs,
            total=len(diffs),
            identical=sum(not d.diverged for d in diffs),
            gates=judged,
            logprob_drift=drift,
        )
    )
