"""``kvdoctor inspect``: parse, analyse (pure core, no torch), render, exit code.

Every mode runs the steps of ``kvdoctor.cli.command`` (:class:`InspectRun`): the report paths proven
writable, the answer, then the ``--json`` document or the tables, the one verdict line, and JUnit and the
step summary last, all read from one :class:`~kvdoctor.report.inspect_report.Report`. Each server's
run is its renderer's (``kvdoctor.cli.render``: SGLang's tables in ``cli/render/sglang.py``, vLLM's in
``cli/render/vllm.py``), imported only when that server is asked about.
"""

# No ``from __future__ import annotations`` here: Typer reads the command's annotations twice (its signature
# with eval_str, then get_type_hints), compiling each string it finds; objects cost it nothing (issue 17).
from dataclasses import replace

import typer

from kvdoctor.api._inspect_args import InspectArgs
from kvdoctor.cli.errors import exit_on_error
from kvdoctor.cli.render import renderer
from kvdoctor.cli.typed_command import command, shown_option
from kvdoctor.engines import Engine, answers_for


def _inspect(ctx: typer.Context, args: InspectArgs, *, json_output: bool) -> None:
    if args.engine is not Engine.KVDOCTOR:  # an installed server's code runs here: not start-up work any more
        from kvdoctor.cli.app import resume_gc

        resume_gc()
    with exit_on_error():
        adapter = answers_for(args.engine, args.server)  # an engine that answers for another server: exit 2
    args = replace(args, server_args=tuple(ctx.args))
    renderer(args.server).inspect_run(ctx, args, adapter, json_output=json_output)()


inspect = command(
    InspectArgs,
    _inspect,
    name="inspect",
    doc="""Which state a model carries, where it lives, and how SGLang backs it up at retraction.

    Any SGLang server flag (e.g. --kv-cache-dtype mxfp8 --disaggregation-mode decode) may follow MODEL,
    or paste a whole launch line after `--` (python -m sglang.launch_server --model-path X ...).
    An option that is neither kvdoctor's nor SGLang's is refused (exit 2) with a did-you-mean.
    """,
    shown=(shown_option("json_output", "--json", help="Print one JSON object instead of tables."),),
    before="strict",
)
