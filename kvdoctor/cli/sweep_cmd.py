"""``kvdoctor sweep MODEL... [options] [-- SERVER FLAGS]``: a server's configuration space searched on real servers
for configurations that break a request's state; ``kvdoctor sweep merge REPORT...`` joins the ``--json`` reports of
a sweep's shards.

Exit codes: 0 every cell that ran is green with its path proven; 1 a finding (a red, loud or vacuous cell); 2 bad
input (checked before anything starts); 3 no cell ran (every one refused or cut by --budget); 4 kvdoctor failed in a
cell; 130/143 after Ctrl-C/SIGTERM (everything started was stopped).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import typer

from kvdoctor._exceptions import InputError
from kvdoctor.cli.typed_command import command, shown_option
from kvdoctor.sweep.options import SweepOptions

MERGE = "merge"  # `kvdoctor sweep merge REPORT...`: the first word names the mode, not a model


def _sweep(
    ctx: typer.Context,
    options: SweepOptions,
    *,
    plan_only: bool,
    json_out: bool,
    junit_path: Path | None,
    html_path: Path | None,
) -> None:
    from kvdoctor.cli import sweep_run  # the run's floors, loaded when a sweep runs (not by --help)

    if options.models[0] == MERGE:
        paths = tuple(Path(p) for p in options.models[1:])
        sweep_run.MergeRun(paths, json_out=json_out, junit_path=junit_path, html_path=html_path)()
        return
    extra = tuple(ctx.args)
    if extra and not extra[0].startswith("-"):
        raise InputError(f"unexpected argument {extra[0]!r} (server flags go after --)")
    options = replace(options, extra_args=extra)
    sweep_run.SweepRun(options, plan_only=plan_only, json_out=json_out, junit_path=junit_path, html_path=html_path)()


sweep = command(
    SweepOptions,
    _sweep,
    name="sweep",
    doc="""Search a server's configuration space for configurations that break a request's state (docs/sweep.md).

    Every configuration of a pairwise covering array over the server flags that keep a request's state runs as a
    consistency run with those flags on the pressured subject, in every scenario; a cell is green only with its path
    proven. Every red cell is repeated, minimized to the flags it is red because of and bisected over releases.
    `kvdoctor sweep merge REPORT...` joins the --json reports of a sweep's shards (--shard I/N).""",
    shown=(
        shown_option("plan_only", "--plan", help="Print the plan (configurations) and run nothing."),
        shown_option("json_out", "--json", help="Print one JSON document (kvdoctor schema sweep)."),
        shown_option(
            "junit_path", "--junit", help="Write JUnit XML, one case per cell.", default=None, annotation=Path | None
        ),
        shown_option(
            "html_path",
            "--html",
            help="Write the matrix as a single-file HTML page to look at.",
            default=None,
            annotation=Path | None,
        ),
    ),
    before={"plan_only": "minimize"},
)
