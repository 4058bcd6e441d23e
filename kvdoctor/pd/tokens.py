"""``pd-eval --oracle tokens``: pd-eval's PD deployment judged by ``kvdoctor consistency``'s greedy token oracle.

One code path, no copy. pd-eval's deployment choices (model, ``--preset`` or the generic flags for ``--tp``,
``--transfer-backend``, ``--ib-device``, the router, the launchers, the server flags after ``--``, ``--host``)
become a :class:`kvdoctor.consistency.deploy.PlanChoices`; its workload knobs become consistency's
:class:`~kvdoctor.consistency.workload.Workload` (``--num-questions`` prompts, ``--parallel`` in flight,
``--max-new-tokens``; ``--prompt-tokens`` and ``--seed`` beside them); ``--timeout``, ``--request-timeout`` and
``--output-dir`` are the run's. Then ``kvdoctor.consistency.run`` does everything: the pressured deployment is
pd-eval's plan with the tight decode pool, the reference the same plan with the roomy one (one shared prefill),
the reference twice for the noise floor, every token and logprob compared, the same gates (a pressured decode
that retracted nothing, or a reference that retracted, is red). Its result becomes pd-eval's
(:func:`to_result`), reported through pd-eval's one report.

The prompts are consistency's seeded token ids: exact whatever tokenizer the server loads and meaningful for a
random checkpoint; GSM8K's text needs the model's tokenizer and trained weights, which is what ``--oracle
gsm8k`` is for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvdoctor.consistency import run as consistency_run
from kvdoctor.consistency.deploy import PlanChoices
from kvdoctor.consistency.prepared import ConsistencyOptions
from kvdoctor.consistency.workload import Workload
from kvdoctor.deploy import plan
from kvdoctor.pd.gate import FAILED, PASSED, GateResult
from kvdoctor.pd.result import PdEvalResult
from kvdoctor.pd.run import PdEvalOptions, base_preset

if TYPE_CHECKING:
    from kvdoctor.consistency.deploy import Deployment
    from kvdoctor.consistency.result import ConsistencyResult

DEFAULT_DEVICE = "cuda"  # pd-eval's plan is a GPU deployment; --device cpu adds the named CPU enablers
CHECKPOINT = "<checkpoint>"  # the model directory a dry run cannot know yet (the seeded checkpoint's)


@dataclass(frozen=True)
class Prepared:
    """Everything known before anything starts: pd-eval's options, consistency's preparation, the plan."""

    options: PdEvalOptions
    consistency: consistency_run.Prepared
    preview: Deployment  # both deployments, on placeholder ports (what --dry-run shows)

    @property
    def launch_plan(self) -> plan.LaunchPlan:
        return self.preview.launch_plan(self.options.model)


def consistency_options(o: PdEvalOptions) -> ConsistencyOptions:
    """pd-eval's options as consistency's: its deployment as the plan's choices, its knobs as the workload."""
    base = base_preset(o)
    w = Workload()
    workload = Workload(
        requests=w.requests if o.num_questions is None else o.num_questions,
        prompt_tokens=w.prompt_tokens if o.prompt_tokens is None else o.prompt_tokens,
        max_new_tokens=w.max_new_tokens if o.max_new_tokens is None else o.max_new_tokens,
        concurrency=w.concurrency if o.parallel is None else o.parallel,
        seed=w.seed if o.seed is None else o.seed,
    )
    choices = PlanChoices(
        preset=base,
        transfer_backend=o.transfer_backend,
        ib_device=o.ib_device,
        mini_lb=base.mini_lb if o.mini_lb is None else o.mini_lb,
        launcher=o.launcher,
        router_launcher=o.router_launcher,
    )
    return ConsistencyOptions(
        model=o.model,
        shrink=o.shrink,
        topology="pd",
        device=o.device or DEFAULT_DEVICE,
        inject=o.inject,
        workload=workload,
        output_dir=o.output_dir,
        host=o.host,
        timeout_s=o.timeout_s,
        request_timeout_s=o.request_timeout_s,
        grace_s=o.grace_s,
        extra_args=o.extra_args,
        junit_path=o.junit_path,
        plan=choices,
    )


def prepare(o: PdEvalOptions) -> Prepared:
    """consistency's ``prepare`` on pd-eval's options (``InputError`` for what the user must fix), and the plan."""
    prepared = consistency_run.prepare(consistency_options(o))
    model_dir = CHECKPOINT if prepared.real_weights is None else o.model
    return Prepared(o, prepared, consistency_run.plan_for(prepared, model_dir, None))


Notify = Callable[[str, str], None]


def run(prepared: Prepared, *, notify: Notify | None = None) -> PdEvalResult:
    """consistency's run (deploy, send, compare, tear down; never raises for deployment trouble), as pd-eval's."""
    result = consistency_run.run(prepared.consistency, notify=notify)
    return to_result(prepared.options, prepared.preview.preset, result)


def to_result(o: PdEvalOptions, preset: str, c: ConsistencyResult) -> PdEvalResult:
    """consistency's result as pd-eval's: the same outcome and gates, the GSM8K fields empty, ``tokens`` whole."""
    steps = list(c.deployment.get("steps", []))
    prefill = next((s for s in steps if s.get("role") == "prefill"), None)
    bootstrap = plan.flag_value(prefill["argv"], "--disaggregation-bootstrap-port") if prefill else None
    return PdEvalResult(
        model=o.model,
        preset=preset,
        threshold=None,
        num_shots=None,
        num_questions=int(c.workload.get("requests", 0)),
        data_sha256=None,
        data_source=None,
        passed=c.passed,
        exit_code=c.exit_code,
        exit_reason=c.exit_reason,
        message=c.message,
        retractions=c.retractions.get("pressured"),
        retraction_source=c.retraction_source,
        gates=[
            GateResult(g.name, PASSED if g.passed else FAILED, g.message, "" if g.passed else g.reason) for g in c.gates
        ],
        plan={
            "model": o.model,
            "preset": preset,
            "external": False,
            "bootstrap_port": int(bootstrap) if bootstrap is not None else None,
            "steps": steps,
        },
        prediction=None,
        logs=dict(c.logs),
        run_dir=c.run_dir or "",
        convention=None,
        api="generate",
        wall_s=c.wall_s,
        oracle="tokens",
        tokens=c,
    )
