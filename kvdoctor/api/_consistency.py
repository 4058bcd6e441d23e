"""``consistency``: a real server deployed twice (roomy reference, pressured run), every greedy token compared."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kvdoctor.api._job import ErrorCase, Job, Progress, check_reports, execute
from kvdoctor.api._keywords import keyword_function, own
from kvdoctor.consistency import report
from kvdoctor.consistency import run as consistency_run
from kvdoctor.consistency.bundle import check_destination
from kvdoctor.consistency.prepared import ConsistencyOptions
from kvdoctor.consistency.report import Report
from kvdoctor.report import reportable, serialize

if TYPE_CHECKING:
    from kvdoctor.consistency.deploy import Deployment
    from kvdoctor.consistency.prepared import Prepared
    from kvdoctor.consistency.result import ConsistencyResult

PlanHook = Callable[["Prepared", "Deployment"], None]  # the run's plan, before anything starts (the CLI's head)


class ConsistencyJob(Job["ConsistencyResult", "Report"]):
    """One consistency run of OPTIONS; progress to ON_EVENT, the plan to ON_PLAN (both optional)."""

    def __init__(
        self, options: ConsistencyOptions, on_event: Progress | None = None, on_plan: PlanHook | None = None
    ) -> None:
        self.options, self.on_event, self.on_plan = options, on_event, on_plan
        self.junit_path = options.junit_path

    def preflight(self) -> None:
        check_reports(self.junit_path, self.options.output_dir)
        o = self.options
        check_destination(o.bundle, inject=o.inject, fault_file=o.fault_file, server=o.server)

    def error_case(self) -> ErrorCase:
        return ErrorCase(report.SUITE, report.TITLE, self.junit_path)

    def prepare(self) -> tuple[Prepared, Deployment]:
        """The run decided (model, checkpoint plan, prompts) and its deployment, nothing started."""
        prepared = consistency_run.prepare(self.options)
        model = "<checkpoint>" if prepared.real_weights is None else self.options.model
        return prepared, consistency_run.plan_for(prepared, model, None)

    def work(self) -> ConsistencyResult:
        prepared, preview = self.prepare()
        if self.on_plan is not None:
            self.on_plan(prepared, preview)
        return consistency_run.run(prepared, notify=self.on_event)

    def report(self, result: ConsistencyResult) -> Report:
        published = Report(result)
        if result.run_dir:  # the run's own record, beside its logs
            serialize.write(Path(result.run_dir) / "result.json", reportable.json_document(published))
        return published


consistency = keyword_function(
    ConsistencyOptions,
    lambda options, on_event=None: execute(ConsistencyJob(options, on_event)),
    name="consistency",
    module=__name__,
    doc="""``kvdoctor consistency MODEL [options] -- SERVER_ARGS``: launch the server twice on the same model and
    prompts, a roomy reference and a pressured deployment that must retract (or preempt), and compare every greedy
    token and logprob. Returns the run's report (``passed``, ``verdict``, ``explain()``, ``to_json()``; its
    ``result`` is the typed :class:`~kvdoctor.consistency.result.ConsistencyResult`). Bad input raises
    :class:`kvdoctor.InputError` before anything starts; a deployment that failed is a report with exit code 3.
    The keyword arguments are :class:`~kvdoctor.consistency.prepared.ConsistencyOptions`' options (the command's,
    by the same names), then ``server_args`` (what follows ``--``) and ``on_event`` (progress).
    """,
    flags_into="extra_args",
    extra=(own("on_event", "Progress | None", None),),
)
