"""``kvdoctor inspect``: parse, analyse (pure core, no torch), render, exit code.

Every mode runs the steps of ``kvdoctor.cli.command`` (:class:`InspectRun`): the report paths proven
writable, the answer, then the ``--json`` document or the tables, the one verdict line, and JUnit and the
step summary last, all read from one :class:`~kvdoctor.report.inspect_report.Report`. Each server's
run is its renderer's (``kvdoctor.cli.render``: SGLang's tables in ``cli/render/sglang.py``, vLLM's in
``cli/render/vllm.py``), imported only when that server is asked about.
"""

# No ``from __future__ import annotations`` here: Typer reads the command's annotations twice (its signature
# with eval_str, then get_type_hints), compiling each string it finds; objects cost it nothing (issue 17).
from pathlib import Path
from typing import Annotated

import typer

from kvdoctor.cli.errors import exit_on_error
from kvdoctor.cli.options import GpuArchOption
from kvdoctor.cli.render import renderer
from kvdoctor.core.servers import DEFAULT_SERVER
from kvdoctor.engines import Engine, GpuArch, Server, answers_for


def inspect(
    ctx: typer.Context,
    model: str = typer.Argument(..., help="config.json path, model directory, bundled fixture or cached Hub id."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
    strict: bool = typer.Option(False, "--strict", help="Exit 1 when any error-severity hazard is found."),
    request_tokens: int = typer.Option(2048, "--request-tokens", min=1, help="Tokens per request (forecast)."),
    concurrent: int = typer.Option(128, "--concurrent", min=1, help="Requests in flight for the retraction forecast."),
    junit_path: Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML: one case per hazard.")] = None,
    engine: Annotated[
        Engine,
        typer.Option(
            "--engine",
            help="Who answers: kvdoctor's rule model alone, or also the installed SGLang, shown beside it.",
        ),
    ] = Engine.KVDOCTOR,
    gpu_arch: GpuArchOption = GpuArch.SM100,
    server: Annotated[
        Server,
        typer.Option(
            "--server",
            help="Which server the flags are for: sglang (default) or vllm (vLLM 0.33 flags and groups).",
        ),
    ] = DEFAULT_SERVER,
) -> None:
    """Which state a model carries, where it lives, and how SGLang backs it up at retraction.

    Any SGLang server flag (e.g. --kv-cache-dtype mxfp8 --disaggregation-mode decode) may follow MODEL,
    or paste a whole launch line after `--` (python -m sglang.launch_server --model-path X ...).
    An option that is neither kvdoctor's nor SGLang's is refused (exit 2) with a did-you-mean.
    """
    if engine is not Engine.KVDOCTOR:  # an installed server's code runs here: not start-up work any more
        from kvdoctor.cli.app import resume_gc

        resume_gc()
    with exit_on_error():
        adapter = answers_for(engine, server)  # an engine that answers for another server: exit 2
    settings = dict(
        gpu_arch=gpu_arch,
        request_tokens=request_tokens,
        concurrent=concurrent,
        json_output=json_output,
        strict=strict,
        junit_path=junit_path,
        server=server,
        engine=engine,
    )
    return renderer(server).inspect_run(ctx, model, adapter, **settings)()
