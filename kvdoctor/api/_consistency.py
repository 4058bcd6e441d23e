"""``consistency``: a real server deployed twice (roomy reference, pressured run), every greedy token compared."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvdoctor.api._arguments import checked
from kvdoctor.api._job import ErrorCase, Job, Progress, check_reports, execute, flags
from kvdoctor.consistency.workload import Workload
from kvdoctor.core.servers import DEFAULT_SERVER

if TYPE_CHECKING:
    from kvdoctor.consistency.deploy import Deployment
    from kvdoctor.consistency.prepared import ConsistencyOptions, Prepared
    from kvdoctor.consistency.report import Report
    from kvdoctor.consistency.result import ConsistencyResult

PlanHook = Callable[["Prepared", "Deployment"], None]  # the run's plan, before anything starts (the CLI's head)

DEFAULT_OUTPUT_DIR = Path("kvdoctor-out/consistency")
DEFAULT_TIMEOUT_S = 1800.0
WORKLOAD = Workload()  # the workload options' defaults


class ConsistencyJob(Job["ConsistencyResult", "Report"]):
    """One consistency run of OPTIONS; progress to ON_EVENT, the plan to ON_PLAN (both optional)."""

    def __init__(
        self, options: ConsistencyOptions, on_event: Progress | None = None, on_plan: PlanHook | None = None
    ) -> None:
        self.options, self.on_event, self.on_plan = options, on_event, on_plan
        self.junit_path = options.junit_path

    def preflight(self) -> None:
        from kvdoctor.consistency.bundle import check_destination

        check_reports(self.junit_path, self.options.output_dir)
        o = self.options
        check_destination(o.bundle, inject=o.inject, fault_file=o.fault_file, server=o.server)

    def error_case(self) -> ErrorCase:
        from kvdoctor.consistency import report

        return ErrorCase(report.SUITE, report.TITLE, self.junit_path)

    def prepare(self) -> tuple[Prepared, Deployment]:
        """The run decided (model, checkpoint plan, prompts) and its deployment, nothing started."""
        from kvdoctor.consistency.run import plan_for, prepare

        prepared = prepare(self.options)
        model = "<checkpoint>" if prepared.real_weights is None else self.options.model
        return prepared, plan_for(prepared, model, None)

    def work(self) -> ConsistencyResult:
        from kvdoctor.consistency.run import run

        prepared, preview = self.prepare()
        if self.on_plan is not None:
            self.on_plan(prepared, preview)
        return run(prepared, notify=self.on_event)

    def report(self, result: ConsistencyResult) -> Report:
        from kvdoctor.consistency.report import Report
        from kvdoctor.report import reportable, serialize

        published = Report(result)
        if result.run_dir:  # the run's own record, beside its logs
            serialize.write(Path(result.run_dir) / "result.json", reportable.json_document(published))
        return published


@checked
def consistency(
    model: str,
    *,
    shrink: bool = False,
    topology: str = "single",
    device: str = "cpu",
    server: str = DEFAULT_SERVER.value,
    inject: str | None = None,
    fault_file: Path | None = None,
    bundle: Path | None = None,
    scenario: str = "preempt",
    requests: int = WORKLOAD.requests,
    prompt_tokens: int = WORKLOAD.prompt_tokens,
    max_new_tokens: int = WORKLOAD.max_new_tokens,
    concurrency: int = WORKLOAD.concurrency,
    seed: int = WORKLOAD.seed,
    output_dir: Path = DEFAULT_OUTPUT_DIR,
    timeout: float = DEFAULT_TIMEOUT_S,
    junit_path: Path | None = None,
    server_args: str | Sequence[str] = (),
    on_event: Progress | None = None,
) -> Report:
    """``kvdoctor consistency MODEL [options] -- SERVER_ARGS``: launch the server twice on the same model and
    prompts, a roomy reference and a pressured deployment that must retract (or preempt), and compare every greedy
    token and logprob. Returns the run's report (``passed``, ``verdict``, ``explain()``, ``to_json()``; its
    ``result`` is the typed :class:`~kvdoctor.consistency.result.ConsistencyResult`). Bad input raises
    :class:`kvdoctor.InputError` before anything starts; a deployment that failed is a report with exit code 3.
    """
    return execute(ConsistencyJob(consistency_options(model, locals()), on_event))


def consistency_options(model: str, given: Mapping[str, Any]) -> ConsistencyOptions:
    """The run's options from the keyword arguments of :func:`consistency` (the CLI's command names its options the
    same: a test holds the two lists equal)."""
    from kvdoctor.consistency.prepared import ConsistencyOptions

    workload = Workload(
        *(int(given[k]) for k in ("requests", "prompt_tokens", "max_new_tokens", "concurrency", "seed"))
    )
    return ConsistencyOptions(
        model=model,
        workload=workload,
        extra_args=flags(given.get("server_args")),
        junit_path=given.get("junit_path"),
        shrink=bool(given["shrink"]),
        topology=str(given["topology"]),
        device=str(given["device"]),
        inject=given.get("inject"),
        fault_file=given.get("fault_file"),
        bundle=given.get("bundle"),
        output_dir=Path(given["output_dir"]),
        timeout_s=float(given["timeout"]),
        server=str(given["server"]),
        scenario=str(given["scenario"]),
    )
