"""``pd_eval``: the real PD deployment (prefill + decode + router), the GSM8K (or token) gate, proof of retraction."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvdoctor.api._arguments import checked
from kvdoctor.api._job import ErrorCase, Job, check_reports, chosen, execute, flags
from kvdoctor.deploy.plan import DEFAULT_LAUNCHER, DEFAULT_ROUTER_LAUNCHER
from kvdoctor.deploy.presets import Api, PresetName  # pure data, no heavy import
from kvdoctor.pd.oracle import Oracle

if TYPE_CHECKING:
    from kvdoctor.pd.report import Report
    from kvdoctor.pd.result import PdEvalResult
    from kvdoctor.pd.run import PdEvalOptions

DEFAULT_OUTPUT_DIR = Path("kvdoctor-out/pd-eval")

# The keyword arguments the options call otherwise (seconds spelled out; the oracle by its value).
_RENAMED = {"timeout": "timeout_s", "request_timeout": "request_timeout_s"}


def pd_eval_options(model: str, given: Mapping[str, Any], server_args: str | Sequence[str]) -> PdEvalOptions:
    """The run's options from :func:`pd_eval`'s keyword arguments (the CLI's command names its options the same)."""
    from kvdoctor.pd.run import PdEvalOptions

    settings = {_RENAMED.get(k, k): v for k, v in given.items() if k not in ("model", "server_args")}
    settings["oracle"] = chosen(Oracle, settings.get("oracle", Oracle.GSM8K), "oracle").value
    return PdEvalOptions(model=model, extra_args=flags(server_args), **settings)


class PdEvalJob(Job["PdEvalResult", "Report"]):
    """One pd-eval of MODEL with GIVEN (:func:`pd_eval`'s keyword arguments) and SERVER_ARGS (both roles')."""

    def __init__(self, model: str, given: Mapping[str, Any], server_args: str | Sequence[str] = ()) -> None:
        self.model, self.given, self.server_args = model, dict(given), flags(server_args)
        self.junit_path = self.given.get("junit_path")

    def check(self) -> None:
        from kvdoctor.pd import oracle

        self.options = pd_eval_options(self.model, self.given, self.server_args)
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
        from kvdoctor.report import reportable

        doc = reportable.json_document(published)
        pd_report.write_all(published.result, Path(published.result.run_dir), junit_path=self.junit_path, doc=doc)


@checked
def pd_eval(
    model: str,
    *,
    preset: PresetName | str | None = None,
    tp: int | None = None,
    transfer_backend: str = "mooncake",
    ib_device: str | None = None,
    num_shots: int | None = None,
    num_questions: int | None = None,
    threshold: float | None = None,
    max_new_tokens: int | None = None,
    parallel: int | None = None,
    api: Api | str | None = None,
    data_path: Path | None = None,
    launcher: str = DEFAULT_LAUNCHER,
    router_launcher: str = DEFAULT_ROUTER_LAUNCHER,
    mini_lb: bool | None = None,
    prefill_url: str | None = None,
    decode_url: str | None = None,
    router_url: str | None = None,
    host: str = "127.0.0.1",
    prefill_port: int | None = None,
    decode_port: int | None = None,
    router_port: int | None = None,
    bootstrap_port: int | None = None,
    output_dir: Path = DEFAULT_OUTPUT_DIR,
    timeout: float = 3600.0,
    request_timeout: float = 600.0,
    allow_no_retraction: bool = False,
    junit_path: Path | None = None,
    oracle: Oracle | str = Oracle.GSM8K,
    shrink: bool = False,
    device: str | None = None,
    inject: str | None = None,
    prompt_tokens: int | None = None,
    seed: int | None = None,
    server_args: str | Sequence[str] = (),
) -> Report:
    """``kvdoctor pd-eval MODEL [options] -- SERVER_ARGS``: launch SGLang prefill + decode + router (or attach to
    running ones), run GSM8K few-shot (``oracle="gsm8k"``) or compare every greedy token against a roomy reference of
    the same plan (``oracle="tokens"``), and gate on the oracle *and* on decode-side retraction having happened.
    Returns the run's report (``passed``, ``verdict``, ``explain()``, ``to_json()``; its ``result`` is the typed
    :class:`~kvdoctor.pd.result.PdEvalResult`)."""
    given = dict(locals())
    return execute(PdEvalJob(model, given, given.pop("server_args")))
