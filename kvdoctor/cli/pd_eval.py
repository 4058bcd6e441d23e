"""``kvdoctor pd-eval MODEL [options] [-- SERVER FLAGS]``: the PD accuracy gate with a retraction guard.

Exit codes: 0 pass, 1 a gate failed (accuracy or retraction guard), 2 bad input (including an
unwritable report path, a malformed --*-url or a pinned port already in use, all refused before
anything starts), 3 the deployment failed (start, crash, timeout, a foreign server on our port, a
process that survived teardown, a malformed or reset retraction counter); 130/143 after
Ctrl-C/SIGTERM (everything started was stopped; ``kvdoctor: interrupted`` / ``kvdoctor: terminated``
on stderr, as every command says it).

Everything before ``--`` is kvdoctor's: an option pd-eval does not define, a unique prefix of one, or a
second positional word is refused (exit 2, one line, did-you-mean), in every mode (launch, ``--dry-run``,
``--*-url``). Only the words after ``--`` may reach a server (``PdEvalCommand``, ``kvdoctor.pd.argv``).

``--oracle tokens`` judges the same deployment by consistency's greedy token-exact comparison against a
roomy reference (``kvdoctor.pd.tokens``); an option only the other oracle reads is refused (exit 2, one line,
``kvdoctor.pd.oracle``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperCommand

from kvdoctor.api._job import ErrorCase
from kvdoctor.api._pd_eval import PdEvalJob
from kvdoctor.cli.command import CommandRun
from kvdoctor.cli.launch import own_options
from kvdoctor.cli.typed_command import command, shown_option
from kvdoctor.pd import argv
from kvdoctor.pd.options import PdEvalOptions  # pure data, no heavy import

if TYPE_CHECKING:
    from kvdoctor.pd.report import Report
    from kvdoctor.pd.result import PdEvalResult

SERVER_WORDS = "kvdoctor.pd-eval.server-words"  # ctx.meta key: the words after ``--``, as given


class PdEvalCommand(TyperCommand):
    """Splits the real argv at ``--`` before Click parses it.

    Click, ignoring unknown options, would hand the command the words it did not know and the words
    after ``--`` mixed in ``ctx.args``; here Click parses only kvdoctor's part (its leftovers are then
    refused by ``argv.check_own_words``) and the server words are kept apart in ``ctx.meta``.
    """

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        value_options = {
            name
            for param in self.get_params(ctx)
            if param.param_type_name == "option" and not getattr(param, "is_flag", False) and param.nargs != 0
            for name in param.opts
        }
        own, server = argv.split(args, value_options)
        ctx.meta[SERVER_WORDS] = tuple(server)
        return super().parse_args(ctx, own)


def _server_words(ctx: typer.Context, model: str) -> tuple[str, ...]:
    """The words after ``--``, once every word before it proved to be kvdoctor's."""
    options = own_options(ctx)
    server = ctx.meta.get(SERVER_WORDS)
    # Without PdEvalCommand's split, ctx.args would mix both sides: then every leftover is refused.
    argv.check_own_words(model, ctx.args, options)
    words = tuple(server or ())
    argv.check_server_words(words, options)
    return words


def _pd_eval(ctx: typer.Context, options: PdEvalOptions, *, dry_run: bool, json_out: bool) -> None:
    PdEvalRun(ctx, options, dry_run=dry_run, json_out=json_out)()


pd_eval = command(
    PdEvalOptions,
    _pd_eval,
    name="pd_eval",
    doc="""Launch SGLang prefill + decode + router, run GSM8K few-shot, and gate on both accuracy and
    decode-side retraction having happened. Extra server flags after `--` go to both roles.""",
    shown=(
        shown_option("dry_run", "--dry-run", help="Print the launch plan and stop."),
        shown_option(
            "json_out", "--json", help="Print the result as JSON on stdout (schema: kvdoctor schema pd-eval)."
        ),
    ),
    before="junit_path",
)


class PdEvalRun(PdEvalJob, CommandRun["PdEvalResult", "Report"]):
    """One ``kvdoctor pd-eval``: :class:`kvdoctor.api.PdEvalJob`'s steps (``kvdoctor.cli.command``), its plan,
    progress and tables on the console.

    Its report paths and pinned ports are proven in ``kvdoctor.pd.run.prepare`` (after the options, before
    anything starts). The run itself turns a deployment failure or a signal into a result whose reports say
    so; what stops it before that (bad input found in ``prepare``: a missing --data-path) leaves the
    unfinished-run record's error case, never an earlier run's pass.
    """

    def __init__(self, ctx: typer.Context, options: PdEvalOptions, *, dry_run: bool, json_out: bool) -> None:
        super().__init__(options)
        self.ctx, self.dry_run, self.json_out = ctx, dry_run, json_out

    def check(self) -> None:
        from rich.console import Console

        self.asked = replace(self.asked, extra_args=_server_words(self.ctx, self.asked.model))
        super().check()
        self.console = Console(stderr=self.json_out)  # with --json, stdout is the JSON alone: progress on stderr
        self.status = None if self.json_out else self.console  # the JSON's verdict is the status line then

    def preflight(self) -> None:
        if not self.dry_run:
            super().preflight()

    def error_case(self) -> ErrorCase:
        case = super().error_case()
        return ErrorCase(case.suite, case.title, None if self.dry_run else case.junit_path)

    def work(self) -> PdEvalResult | None:
        from kvdoctor.pd import render

        console = self.console
        prepared = self.prepare(dry_run=self.dry_run)
        if self.dry_run:
            # A plan, not a verdict: the human form stays shell-ready lines (no verdict line to paste).
            self._print_plan(prepared)
            return None
        if self.tokens:
            render.print_tokens_plan(console, prepared)
            return self.run_prepared(prepared, notify=lambda m: render.event(console, m))
        render.print_plan(console, prepared)
        with render.progress(console) as hook:
            return self.run_prepared(prepared, progress=hook, notify=lambda m: render.event(console, m))

    def _print_plan(self, prepared: Any) -> None:
        from kvdoctor.pd import render
        from kvdoctor.pd import report as pd_report
        from kvdoctor.report import serialize

        if not self.json_out:
            (render.print_tokens_plan if self.tokens else render.print_plan)(self.console, prepared)
        elif self.tokens:
            d = prepared.preview
            enablers = [{"name": e.name, "where": e.where, "why": e.why} for e in d.enablers]
            doc = pd_report.tokens_dry_run_document(
                prepared.launch_plan.to_dict(), d.to_dict(), enablers, prepared.consistency.options.workload.to_dict()
            )
            print(serialize.dumps(doc), end="")
        else:
            forecast = prepared.prediction.to_dict() if prepared.prediction else None
            print(serialize.dumps(pd_report.dry_run_document(prepared.plan.to_dict(), forecast)), end="")

    def deliver(self, result: PdEvalResult) -> Report:
        from kvdoctor.pd import publish

        if result.tokens is not None:
            # consistency's findings (bursts, noise floor, divergences, fault); its gates are the summary table's rows
            from kvdoctor.cli.consistency import print_result as print_consistency

            print_consistency(self.console, result.tokens, gates=False)

        return publish.finish(
            result, Path(result.run_dir), junit_path=self.junit_path, json_out=self.json_out, console=self.console
        )

    def said(self, published: Report) -> bool:
        # a report that could not be written: publish.finish said its one line and made the exit 2
        return published.exit_code != published.result.exit_code
