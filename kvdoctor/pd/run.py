"""One PD eval, end to end: plan → launch and wait → GSM8K through the router → retraction
guard → gates. Every path out (pass, gate failure, crash, timeout, Ctrl-C, SIGTERM) leaves the
``Supervisor`` block, so every process the run started is gone before a result is returned (and a
process that could not be stopped fails the run). ``--timeout`` is one ``Deadline`` that bounds
every step, health checks and probes included. Each run writes into a fresh run directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from kvdoctor._exceptions import EXIT_DEPLOYMENT, EXIT_GATE, EXIT_PASS, DeploymentError, InputError, Interrupted
from kvdoctor.deploy import client, http, plan, ports, prediction, presets, rundir, urls
from kvdoctor.deploy.deadline import Deadline
from kvdoctor.deploy.metrics import RetractionProbe
from kvdoctor.deploy.signals import SignalLatch, signals_raise
from kvdoctor.deploy.supervisor import Supervisor
from kvdoctor.pd import argv, gate, gsm8k
from kvdoctor.pd.options import PdEvalOptions
from kvdoctor.pd.result import PdEvalResult, record, score
from kvdoctor.report.preflight import check_outputs

SMOKE_PROMPT = "Question: What is 1 + 1?\nAnswer:"
PROBE_TIMEOUT_S = 10.0  # one /server_info or /metrics request, capped by the run's deadline


@dataclass(frozen=True)
class Settings:
    """The eval knobs after preset defaults were applied."""

    num_shots: int
    num_questions: int | None
    threshold: float
    max_new_tokens: int
    parallel: int
    api: str


@dataclass
class Prepared:
    """Everything known before anything starts (what ``--dry-run`` shows)."""

    options: PdEvalOptions
    settings: Settings
    plan: plan.LaunchPlan
    prediction: prediction.Prediction | None
    data: gsm8k.DataFile | None
    questions: list[gsm8k.Question] = field(default_factory=list)

    @property
    def served_model(self) -> str:
        return plan.flag_value(self.options.extra_args, "--served-model-name") or self.options.model


def settings_for(o: PdEvalOptions, defaults: presets.EvalDefaults) -> Settings:
    s = Settings(
        num_shots=defaults.num_shots if o.num_shots is None else o.num_shots,
        num_questions=defaults.num_questions if o.num_questions is None else o.num_questions,
        threshold=defaults.threshold if o.threshold is None else o.threshold,
        max_new_tokens=defaults.max_new_tokens if o.max_new_tokens is None else o.max_new_tokens,
        parallel=defaults.parallel if o.parallel is None else o.parallel,
        api=defaults.api if o.api is None else o.api.value if isinstance(o.api, client.Api) else o.api,
    )
    if not 0.0 <= s.threshold <= 1.0:
        raise InputError(f"--threshold must be within [0, 1], got {s.threshold}")
    if s.parallel < 1 or s.max_new_tokens < 1:
        raise InputError("--parallel and --max-new-tokens must be >= 1")
    if s.api not in client.APIS:
        raise InputError(f"--api must be one of {', '.join(client.APIS)}")
    return s


def base_preset(o: PdEvalOptions) -> presets.Preset:
    """The deployment's flags: the ``--preset`` (its TP replaced by ``--tp``), else the generic one for ``--tp``."""
    if o.tp is not None and o.tp < 1:
        raise InputError("--tp must be >= 1")
    base = presets.get(o.preset) if o.preset else presets.generic(o.tp or 1)
    if o.preset and o.tp is not None:
        base = presets.with_tp(base, o.tp)
    return base


def prepare(o: PdEvalOptions, *, download: bool, dry_run: bool = False) -> Prepared:
    """Resolve preset, data, ports and plan; raises ``InputError`` for anything the user must fix.

    A real run (not ``dry_run``) also proves every report can be written and every pinned port is
    free before anything starts: an hour of GPU time must not end in "cannot write result.json",
    and a server already listening on a pinned port would answer for the one we start.
    """
    base = base_preset(o)
    settings = settings_for(o, base.eval)
    _check_seconds("--timeout", o.timeout_s)
    _check_seconds("--request-timeout", o.request_timeout_s)
    _check_seconds("grace period", o.grace_s, allow_zero=True)
    _check_ports(o)
    plan.check_extra_args(o.extra_args)
    external = _external_urls(o)
    if external:
        argv.check_unreachable(o.extra_args)
    if not dry_run:
        check_outputs(junit_path=o.junit_path, output_dir=o.output_dir)
        if not external:
            ports.check_free(o.host, _pinned(o))
    data = gsm8k.resolve_data(o.data_path, download=download)
    questions = []
    if data is not None:
        questions = gsm8k.select(gsm8k.load_examples(data.path), settings.num_shots, settings.num_questions)
        mean_chars = statistics.fmean(len(q.prompt) for q in questions)
    else:
        mean_chars = gsm8k.estimated_prompt_chars(settings.num_shots)
    n = len(questions) if questions else settings.num_questions
    if external:
        launch = _external_plan(o, external)
        decode_args: list[str] = []
    else:
        _, per_request, _, peak = prediction.peak_demand(mean_chars, settings.max_new_tokens, settings.parallel, n)
        launch = plan.build(
            plan.PlanOptions(
                model=o.model,
                preset=base,
                transfer_backend=o.transfer_backend,
                ib_device=o.ib_device,
                launcher=o.launcher,
                router_launcher=o.router_launcher,
                mini_lb=base.mini_lb if o.mini_lb is None else o.mini_lb,
                host=o.host,
                pool_tokens=prediction.default_pool_tokens(per_request, peak),
                extra_args=o.extra_args,
            ),
            _ports(o),
        )
        decode = launch.step("decode")
        assert decode is not None
        decode_args = list(decode.argv[len(plan.split_command("--launcher", o.launcher)) :])
    forecast = None
    if decode_args:
        forecast = prediction.predict(
            o.model,
            decode_args,
            mean_prompt_chars=mean_chars,
            max_new_tokens=settings.max_new_tokens,
            parallel=settings.parallel,
            num_questions=n,
        )
    return Prepared(o, settings, launch, forecast, data, questions)


def _external_urls(o: PdEvalOptions) -> dict[str, str]:
    """The ``--*-url`` options given, each validated (http/https, host, port) and normalised."""
    given = {
        "prefill": ("--prefill-url", o.prefill_url),
        "decode": ("--decode-url", o.decode_url),
        "router": ("--router-url", o.router_url),
    }
    return {role: urls.check_base_url(option, url) for role, (option, url) in given.items() if url is not None}


def _external_plan(o: PdEvalOptions, given: dict[str, str]) -> plan.LaunchPlan:
    if "router" not in given:
        raise InputError("--router-url is required when --prefill-url/--decode-url are given")
    if "decode" not in given and not o.allow_no_retraction:
        raise InputError("--decode-url is required to read retractions (or pass --allow-no-retraction)")
    return plan.external(
        o.model, router_url=given["router"], decode_url=given.get("decode"), prefill_url=given.get("prefill")
    )


def _check_seconds(name: str, value: float, *, allow_zero: bool = False) -> None:
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise InputError(f"{name} must be a finite number of seconds > 0, got {value}")


def _pinned(o: PdEvalOptions) -> dict[str, int]:
    pinned = {
        "--prefill-port": o.prefill_port,
        "--decode-port": o.decode_port,
        "--router-port": o.router_port,
        "--bootstrap-port": o.bootstrap_port,
    }
    return {name: port for name, port in pinned.items() if port is not None}


def _check_ports(o: PdEvalOptions) -> None:
    given = _pinned(o)
    for name, port in given.items():
        if not 1 <= port <= 65535:
            raise InputError(f"{name} must be within 1..65535, got {port}")
    by_port: dict[int, list[str]] = {}
    for name, port in given.items():
        by_port.setdefault(port, []).append(name)
    for port, names in by_port.items():
        if len(names) > 1:
            raise InputError(f"{' and '.join(names)} are both {port}: each needs its own port")


def _ports(o: PdEvalOptions) -> plan.Ports:
    pinned = [o.prefill_port, o.decode_port, o.router_port, o.bootstrap_port]
    free = iter(ports.free_ports(5, host=o.host, avoid=[p for p in pinned if p]))
    return plan.Ports(
        prefill=o.prefill_port or next(free),
        decode=o.decode_port or next(free),
        router=o.router_port or next(free),
        bootstrap=o.bootstrap_port or next(free),
        router_metrics=next(free),
    )


ProgressHook = Callable[[int], Callable[[int, client.Completion], None]]


def run(
    prepared: Prepared, *, progress: ProgressHook | None = None, notify: Callable[[str], None] | None = None
) -> PdEvalResult:
    """Launch (or attach), evaluate, guard, and tear down; never raises for deployment trouble.

    Raises ``InputError`` only when the run directory cannot be created (before anything starts).
    """
    o, s, launch = prepared.options, prepared.settings, prepared.plan
    result = PdEvalResult(
        model=o.model,
        preset=launch.preset,
        threshold=s.threshold,
        num_shots=s.num_shots,
        num_questions=len(prepared.questions),
        data_sha256=prepared.data.sha256 if prepared.data else None,
        data_source=prepared.data.source if prepared.data else None,
        plan=launch.to_dict(),
        api=s.api,
        prediction=prepared.prediction.to_dict() if prepared.prediction else None,
    )
    run_dir = rundir.create(o.output_dir)
    result.run_dir = str(run_dir)
    (notify or _quiet)(f"run directory: {run_dir}")
    deadline = Deadline(o.timeout_s)
    supervisor: Supervisor | None = None
    try:
        with signals_raise() as latch, Supervisor(run_dir, grace_s=o.grace_s, latch=latch) as supervisor:
            _evaluate(prepared, supervisor, latch, deadline, result, progress, notify or _quiet)
    except DeploymentError as exc:
        result.passed = False
        result.exit_code = EXIT_DEPLOYMENT
        result.exit_reason = getattr(exc, "reason", "deployment_failed")
        result.message = str(exc)
    except (Interrupted, KeyboardInterrupt) as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else 2
        result.passed = False
        result.exit_code = Interrupted.exit_code_for(signum)
        result.exit_reason = "interrupted"
        result.message = f"interrupted by {exc or 'SIGINT'}; every started process was stopped"
    except Exception as exc:  # CI must get result.json and exit 3, never a traceback and exit 1
        result.passed = False
        result.exit_code = EXIT_DEPLOYMENT
        result.exit_reason = "internal_error"
        result.message = f"kvdoctor failed during the run: {type(exc).__name__}: {exc}"
    if supervisor is not None and supervisor.survivors:
        _fail_for_survivors(result, supervisor.survivors)
    result.wall_s = time.monotonic() - deadline.started
    return result


def _fail_for_survivors(result: PdEvalResult, survivors: list[str]) -> None:
    """A process still running after teardown fails the run: it holds ports, GPUs, memory."""
    names = ", ".join(survivors)
    if result.exit_reason == "interrupted":
        result.message = result.message.replace(
            "every started process was stopped", f"still running (stop them by hand): {names}"
        )
        return
    result.message += f"; still running after teardown (stop them by hand): {names}"
    if result.exit_code in (EXIT_PASS, EXIT_GATE):
        result.passed = False
        result.exit_code = EXIT_DEPLOYMENT
        result.exit_reason = "processes_survived"


def _quiet(_message: str) -> None:
    pass


def _evaluate(
    prepared: Prepared,
    supervisor: Supervisor,
    latch: SignalLatch,
    deadline: Deadline,
    result: PdEvalResult,
    progress: ProgressHook | None,
    notify: Callable[[str], None],
) -> None:
    o, s, launch = prepared.options, prepared.settings, prepared.plan
    for step in launch.steps:
        managed = None
        if step.argv:
            managed = supervisor.start(step.role, step.argv, step.env)
            result.logs[step.role] = str(managed.log_path)
            notify(f"{step.role}: started (pid {managed.pid}, log {managed.log_path})")
        # Named before it runs: waiting for a model to load can take minutes, and the last line shown
        # must say what kvdoctor is waiting for, not what it finished.
        notify(f"{step.role}: waiting until GET {step.url}{step.health_path} answers")
        supervisor.wait_healthy(managed, step.url + step.health_path, deadline.at)
        notify(f"{step.role}: healthy at {step.url}")
    sampling = client.Sampling(max_new_tokens=s.max_new_tokens, stop=gsm8k.STOP, model=prepared.served_model, api=s.api)

    def send(
        prompts: list[str],
        what: str,
        on_done: Callable[[int, client.Completion], None] | None = None,
    ) -> list[client.Completion]:
        with latch.deferred():  # see kvdoctor.deploy.signals: never raise inside the event loop
            return asyncio.run(
                client.complete_all(
                    launch.router_url,
                    prompts,
                    sampling,
                    parallel=s.parallel,
                    request_timeout_s=o.request_timeout_s,
                    run_timeout_s=o.timeout_s,
                    what=what,
                    time_left_s=deadline.left(),
                    on_done=on_done,
                    watchdog=supervisor.check_alive,
                )
            )

    # One real request first: a router that answers /health may still not route.
    notify("router: sending the first request through it")
    smoke = send([SMOKE_PROMPT], "the first request through the router")[0]
    if smoke.error is not None:
        raise DeploymentError(f"the router at {launch.router_url} cannot serve: {smoke.error}")
    decode = launch.step("decode")
    watchdog = supervisor.check_alive
    result.server_versions, result.retraction_backup = deadline.call(
        lambda: _server_info(launch, deadline), what="the /server_info probes", watchdog=watchdog
    )
    decode_log = Path(result.logs["decode"]) if "decode" in result.logs else None
    probe = RetractionProbe(decode.url if decode else None, decode_log)
    deadline.call(
        lambda: probe.start(deadline.request_timeout(PROBE_TIMEOUT_S)),
        what="the retraction count before the eval",
        watchdog=watchdog,
    )
    prompts = [q.prompt for q in prepared.questions]
    began = time.perf_counter()
    completions = send(prompts, "the eval", progress(len(prompts)) if progress else None)
    latency = time.perf_counter() - began
    count = deadline.call(
        lambda: probe.finish(deadline.request_timeout(PROBE_TIMEOUT_S)),
        what="the retraction count after the eval",
        watchdog=watchdog,
    )
    result.records = [record(q, c) for q, c in zip(prepared.questions, completions, strict=True)]
    result.score = score(result.records, latency)
    result.retractions, result.retraction_source = count.value, count.source
    result.gates = [
        gate.accuracy(result.score.accuracy, s.threshold),
        gate.retraction(count, allow_none=o.allow_no_retraction),
    ]
    failed = [g for g in result.gates if not g.passed]
    result.passed = not failed
    result.exit_code = EXIT_GATE if failed else EXIT_PASS
    result.exit_reason = failed[0].reason if failed else "passed"
    result.message = "; ".join(g.message for g in result.gates)


def _server_info(launch: plan.LaunchPlan, deadline: Deadline) -> tuple[dict[str, str], str | None]:
    """SGLang versions per role and decode's resolved retraction backup (best effort)."""
    versions: dict[str, str] = {}
    backup = None
    for role in ("prefill", "decode"):
        step = launch.step(role)
        if step is None:
            continue
        info = _first_json(step.url, ("/server_info", "/get_server_info"), deadline)
        if info.get("version"):
            versions[role] = str(info["version"])
        if role == "decode":
            backup = info.get("disaggregation_decode_retraction_backup")
    return versions, backup


def _first_json(base_url: str, paths: tuple[str, ...], deadline: Deadline) -> dict[str, object]:
    """The first of ``paths`` that answers a JSON object (newer SGLang renamed the endpoint)."""
    for path in paths:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            response = http.get(base_url + path, timeout_s=deadline.request_timeout(PROBE_TIMEOUT_S))
            if response.status_code == 200 and isinstance(info := response.json(), dict):
                return info
    return {}
