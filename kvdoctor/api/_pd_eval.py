"""``pd_eval``: the real PD deployment (prefill + decode + router), the GSM8K (or token) gate, proof of retraction."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvdoctor.api._job import ErrorCase, Job, check_reports, chosen, execute
from kvdoctor.api._keywords import keyword_function
from kvdoctor.pd import oracle
from kvdoctor.pd.options import Oracle, PdEvalOptions  # pure data, no heavy import
from kvdoctor.report import reportable

if TYPE_CHECKING:
    from kvdoctor.pd.report import Report
    from kvdoctor.pd.result import PdEvalResult


class PdEvalJob(Job["PdEvalResult", "Report"]):
    """One pd-eval with OPTIONS (its ``extra_args``: both roles' server flags)."""

    def __init__(self, options: PdEvalOptions) -> None:
        self.asked = options
        self.junit_path = options.junit_path

    def check(self) -> None:
        self.options = replace(self.asked, oracle=chosen(Oracle, self.asked.oracle, "oracle").value)
        oracle.check(self.options)
        self.tokens = self.options.oracle == Oracle.TOKENS.value

    def preflight(self) -> None:
        if self.tokens:  # the GSM8K path proves its reports and pinned ports in kvdoctor.pd.run.prepare
            check_reports(self.junit_path, self.options.output_dir)

    def error_case(self) -> ErrorCase:
        from kvdoctor.pd.report import SUITE, TITLE

        return ErrorCase(SUITE, TITLE, self.junit_path)

    def prepare(self, *, dry_run: bool = False) -> Any:
        """The plan (``kvdoctor.pd.run.Prepared``, or ``kvdoctor.pd.tokens.Prepared`` for the token oracle)."""
        if self.tokens:
            from kvdoctor.pd import tokens

            return tokens.prepare(self.options)
        from kvdoctor.pd.run import prepare

        return prepare(self.options, download=not dry_run, dry_run=dry_run)

    def run_prepared(
        self, prepared: Any, *, progress: Any = None, notify: Callable[[str], None] | None = None
    ) -> PdEvalResult:
        """Launch (or attach), evaluate, guard, tear down; never raises for deployment trouble (exit 3). First what
        the launches need in this Python (exit 2 naming the environment, after every check of the input and
        before any work: ``kvdoctor.pd.environment``)."""
        from kvdoctor.pd import environment
        from kvdoctor.pd.run import base_preset

        o = self.options
        environment.check(o, mini_lb=base_preset(o).mini_lb if o.mini_lb is None else o.mini_lb)
        if self.tokens:
            from kvdoctor.pd import tokens

            told = (lambda phase, m: notify(f"[{phase}] {m}")) if notify is not None else None
            return tokens.run(prepared, notify=told)
        from kvdoctor.pd.run import run

        return run(prepared, progress=progress, notify=notify)

    def work(self) -> PdEvalResult:
        return self.run_prepared(self.prepare())

    def report(self, result: PdEvalResult) -> Report:
        from kvdoctor.pd.report import Report

        return Report(result)

    def publish(self, published: Report) -> None:
        """``result.json``, the per-question rows, JUnit and the step summary, into the run's own directory."""
        from kvdoctor.pd import report as pd_report

        doc = reportable.json_document(published)
        pd_report.write_all(published.result, Path(published.result.run_dir), junit_path=self.junit_path, doc=doc)


pd_eval = keyword_function(
    PdEvalOptions,
    lambda options: execute(PdEvalJob(options)),
    name="pd_eval",
    module=__name__,
    doc="""``kvdoctor pd-eval MODEL [options] -- SERVER_ARGS``: launch SGLang prefill + decode + router (or attach to
    running ones), run GSM8K few-shot (``oracle="gsm8k"``) or compare every greedy token against a roomy reference of
    the same plan (``oracle="tokens"``), and gate on the oracle *and* on decode-side retraction having happened.
    Returns the run's report (``passed``, ``verdict``, ``explain()``, ``to_json()``; its ``result`` is the typed
    :class:`~kvdoctor.pd.result.PdEvalResult`).""",
    flags_into="extra_args",
)
