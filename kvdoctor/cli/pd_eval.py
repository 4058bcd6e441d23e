"""``kvdoctor pd-eval MODEL [options] [-- SERVER FLAGS]``: the PD accuracy gate with a retraction guard.

Exit codes: 0 pass, 1 a gate failed (accuracy or retraction guard), 2 bad input (including an
unwritable report path, a malformed --*-url or a pinned port already in use, all refused before
anything starts), 3 the deployment failed (start, crash, timeout, a foreign server on our port, a
process that survived teardown); 130/143 after Ctrl-C/SIGTERM (everything started was stopped).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvdoctor.cli.errors import exit_on_error
from kvdoctor.pd.plan import DEFAULT_LAUNCHER, DEFAULT_ROUTER_LAUNCHER
from kvdoctor.pd.presets import Api, EvalDefaults, PresetName  # pure data, no heavy import

DEFAULT_OUTPUT_DIR = Path("kvdoctor-out/pd-eval")
_EVAL = EvalDefaults()  # the generic defaults; a --preset brings its own, which is what "or the preset's" means


_FREE = "a free port"


def _or_preset(value: object) -> str:
    return f"{value}, or the preset's"


def pd_eval(
    ctx: typer.Context,
    model: str = typer.Argument(..., help="Model path or HF id, passed as --model-path."),
    preset: Annotated[
        PresetName | None,
        typer.Option("--preset", help="Reproduce a reference test exactly: its flags and its eval defaults."),
    ] = None,
    tp: int | None = typer.Option(None, "--tp", help="TP size per role.", show_default=_or_preset(1)),
    transfer_backend: str = typer.Option(
        "mooncake", "--transfer-backend", help="--disaggregation-transfer-backend for both roles."
    ),
    ib_device: str | None = typer.Option(None, "--ib-device", help="--disaggregation-ib-device for both roles."),
    num_shots: int | None = typer.Option(
        None, "--num-shots", help="Few-shot examples.", show_default=_or_preset(_EVAL.num_shots)
    ),
    num_questions: int | None = typer.Option(
        None, "--num-questions", help="Scored questions after the shots.", show_default=_or_preset(_EVAL.num_questions)
    ),
    threshold: float | None = typer.Option(
        None, "--threshold", help="Accuracy floor.", show_default=_or_preset(f"{_EVAL.threshold:.2f}")
    ),
    max_new_tokens: int | None = typer.Option(
        None, "--max-new-tokens", help="Per answer.", show_default=_or_preset(_EVAL.max_new_tokens)
    ),
    parallel: int | None = typer.Option(
        None, "--parallel", help="Requests in flight.", show_default=_or_preset(_EVAL.parallel)
    ),
    api: Annotated[
        Api | None,
        typer.Option(
            "--api",
            help="completions: /v1/completions, as SGLang's gate; generate: /generate.",
            show_default=_or_preset(_EVAL.api),
        ),
    ] = None,
    data_path: Annotated[
        Path | None,
        typer.Option("--data-path", help="GSM8K test.jsonl (default: sha256-checked cache, bundled copy, download)."),
    ] = None,
    launcher: str = typer.Option(DEFAULT_LAUNCHER, "--launcher", help="Server command."),
    router_launcher: str = typer.Option(DEFAULT_ROUTER_LAUNCHER, "--router-launcher", help="Router command."),
    mini_lb: bool | None = typer.Option(
        None,
        "--mini-lb/--no-mini-lb",
        help="Python mini load balancer instead of the Rust one.",
        show_default="the Rust router, or the preset's",
    ),
    prefill_url: str | None = typer.Option(None, "--prefill-url", help="Use a running prefill."),
    decode_url: str | None = typer.Option(None, "--decode-url", help="Use a running decode."),
    router_url: str | None = typer.Option(None, "--router-url", help="Use a running router."),
    host: str = typer.Option("127.0.0.1", "--host", help="Host the servers bind to."),
    prefill_port: int | None = typer.Option(None, "--prefill-port", help="Prefill's port.", show_default=_FREE),
    decode_port: int | None = typer.Option(None, "--decode-port", help="Decode's port.", show_default=_FREE),
    router_port: int | None = typer.Option(None, "--router-port", help="The router's port.", show_default=_FREE),
    bootstrap_port: int | None = typer.Option(
        None, "--bootstrap-port", help="Shared by prefill and decode.", show_default=_FREE
    ),
    output_dir: Annotated[
        Path,
        typer.Option(
            "--output-dir",
            help="Each run writes its logs, result.json and per-question rows into a new "
            "run-<time>-<id>/ directory here.",
        ),
    ] = DEFAULT_OUTPUT_DIR,
    timeout: float = typer.Option(3600.0, "--timeout", help="Seconds for the whole run."),
    request_timeout: float = typer.Option(600.0, "--request-timeout", help="Seconds per request."),
    allow_no_retraction: bool = typer.Option(
        False, "--allow-no-retraction", help="Do not fail when decode never retracted."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the launch plan and stop."),
    json_out: bool = typer.Option(
        False, "--json", help="Print the result as JSON on stdout (schema: kvdoctor schema pd-eval)."
    ),
    junit_path: Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML, one test case per gate.")] = None,
) -> None:
    """Launch SGLang prefill + decode + router, run GSM8K few-shot, and gate on accuracy *and* on
    decode-side retraction having happened. Extra server flags after `--` go to both roles."""
    with exit_on_error():
        from rich.console import Console

        from kvdoctor.cli.verdict import print_verdict
        from kvdoctor.pd import publish, render, reporting
        from kvdoctor.pd.run import PdEvalOptions, prepare, run
        from kvdoctor.report import serialize

        options = PdEvalOptions(
            model=model,
            preset=preset,
            tp=tp,
            transfer_backend=transfer_backend,
            ib_device=ib_device,
            num_shots=num_shots,
            num_questions=num_questions,
            threshold=threshold,
            max_new_tokens=max_new_tokens,
            parallel=parallel,
            api=api,
            data_path=data_path,
            launcher=launcher,
            router_launcher=router_launcher,
            mini_lb=mini_lb,
            prefill_url=prefill_url,
            decode_url=decode_url,
            router_url=router_url,
            host=host,
            prefill_port=prefill_port,
            decode_port=decode_port,
            router_port=router_port,
            bootstrap_port=bootstrap_port,
            output_dir=output_dir,
            timeout_s=timeout,
            request_timeout_s=request_timeout,
            allow_no_retraction=allow_no_retraction,
            extra_args=tuple(ctx.args),
            junit_path=junit_path,
        )
        console = Console(stderr=json_out)
        prepared = prepare(options, download=not dry_run, dry_run=dry_run)
        if dry_run:
            # A plan, not a verdict: the human form stays shell-ready lines (no verdict line to paste).
            if json_out:
                forecast = prepared.prediction.to_dict() if prepared.prediction else None
                print(serialize.dumps(reporting.dry_run_document(prepared.plan.to_dict(), forecast)), end="")
            else:
                render.print_plan(console, prepared)
            return
        render.print_plan(console, prepared)
        with render.progress(console) as hook:
            result = run(prepared, progress=hook, notify=lambda m: render.event(console, m))
        finished = publish.finish(
            result, Path(result.run_dir), junit_path=junit_path, json_out=json_out, console=console
        )
        print_verdict(console, finished.verdict, finished.detail)
        if finished.exit_code:
            raise typer.Exit(finished.exit_code)
