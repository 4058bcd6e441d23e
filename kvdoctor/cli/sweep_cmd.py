"""``kvdoctor sweep MODEL... [options] [-- SERVER FLAGS]``: a server's configuration space searched on real servers
for configurations that break a request's state; ``kvdoctor sweep merge REPORT...`` joins the ``--json`` reports of
a sweep's shards.

Exit codes: 0 every cell that ran is green with its path proven; 1 a finding (a red, loud or vacuous cell); 2 bad
input (checked before anything starts); 3 no cell ran (every one refused or cut by --budget); 4 kvdoctor failed in a
cell; 130/143 after Ctrl-C/SIGTERM (everything started was stopped).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvdoctor._exceptions import InputError
from kvdoctor.cli.consistency_options import (
    ConcurrencyOption,
    FaultFileOption,
    MaxNewTokensOption,
    PromptTokensOption,
    RequestsOption,
    SeedOption,
    ServerDeviceOption,
    ShrinkOption,
    TopologyOption,
)
from kvdoctor.core.servers import DEFAULT_SERVER

MERGE = "merge"  # `kvdoctor sweep merge REPORT...`: the first word names the mode, not a model
_DURATION = {"s": 1.0, "m": 60.0, "h": 3600.0}


def duration(text: str) -> float:
    """``90``, ``90s``, ``45m``, ``1.5h`` as seconds (exit 2 for anything else)."""
    unit = text[-1:].lower()
    number = text[:-1] if unit in _DURATION else text
    try:
        seconds = float(number) * _DURATION.get(unit, 1.0)
    except ValueError:
        raise InputError(f"--budget {text}: a duration such as 3600, 90s, 45m or 1.5h") from None
    if not seconds > 0 or seconds != seconds or seconds == float("inf"):
        raise InputError(f"--budget {text}: must be a finite duration > 0")
    return seconds


def sweep(
    ctx: typer.Context,
    models: Annotated[
        list[str],
        typer.Argument(
            help="Models (directory, bundled fixture name or HF id), or `merge` then the --json reports to join."
        ),
    ],
    server: Annotated[
        str, typer.Option("--server", help="sglang or vllm: whose servers run and whose flags are swept.")
    ] = DEFAULT_SERVER.value,
    topology: TopologyOption = "single",
    scenario: Annotated[
        list[str] | None,
        typer.Option(
            "--scenario",
            help="A scenario every configuration runs (repeatable); default: every one the "
            "server runs on the topology, those it cannot listed as refused.",
        ),
    ] = None,
    space: Annotated[
        Path | None,
        typer.Option(
            "--space",
            help="Your own space: a TOML file of [[factor]] tables (docs/sweep.md); default: the "
            "server's built-in one.",
        ),
    ] = None,
    strength: Annotated[
        int, typer.Option("--strength", help="Every t-tuple of flag values meets in a configuration (2: pairs).")
    ] = 2,
    budget: Annotated[
        str | None,
        typer.Option(
            "--budget",
            help="Stop starting runs after this long (3600, 90m, 1.5h); the report says the coverage reached.",
        ),
    ] = None,
    shard: Annotated[
        str | None, typer.Option("--shard", help="Run share I of N of the plan (1/4): one CI matrix job each.")
    ] = None,
    plan_only: Annotated[bool, typer.Option("--plan", help="Print the plan (configurations) and run nothing.")] = False,
    minimize: Annotated[
        bool,
        typer.Option("--minimize/--no-minimize", help="Repeat, minimize and bisect every red cell (default on)."),
    ] = True,
    repeat: Annotated[int, typer.Option("--repeat", help="Extra runs of a red cell: deterministic or flaky.")] = 1,
    release: Annotated[
        list[str] | None,
        typer.Option(
            "--release",
            help="An older release to bisect over (repeatable; make sglang-overlay VERSION=...); "
            "default: every overlay present.",
        ),
    ] = None,
    shrink: ShrinkOption = False,
    device: ServerDeviceOption = "cpu",
    inject: Annotated[
        str | None, typer.Option("--inject", help="A fault armed in every cell (kvdoctor faults): where does it show?")
    ] = None,
    fault_file: FaultFileOption = None,
    requests: RequestsOption = 12,
    prompt_tokens: PromptTokensOption = 32,
    max_new_tokens: MaxNewTokensOption = 32,
    concurrency: ConcurrencyOption = 12,
    seed: SeedOption = 0,
    output_dir: Annotated[
        Path, typer.Option("--output-dir", help="Every cell's run directory and the checkpoint cache go here.")
    ] = Path("kvdoctor-out/sweep"),
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds for each run.")] = 1800.0,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON document (kvdoctor schema sweep).")] = False,
    junit_path: Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML, one case per cell.")] = None,
    html_path: Annotated[
        Path | None, typer.Option("--html", help="Write the matrix as a single-file HTML page to look at.")
    ] = None,
) -> None:
    """Search a server's configuration space for configurations that break a request's state (docs/sweep.md).

    Every configuration of a pairwise covering array over the server flags that keep a request's state runs as a
    consistency run with those flags on the pressured subject, in every scenario; a cell is green only with its path
    proven. Every red cell is repeated, minimized to the flags it is red because of and bisected over releases.
    `kvdoctor sweep merge REPORT...` joins the --json reports of a sweep's shards (--shard I/N)."""
    from kvdoctor.cli import sweep_run  # the run's floors, loaded when a sweep runs (not by --help)

    if models[0] == MERGE:
        sweep_run.MergeRun(
            tuple(Path(p) for p in models[1:]), json_out=json_out, junit_path=junit_path, html_path=html_path
        )()
        return
    extra = tuple(ctx.args)
    if extra and not extra[0].startswith("-"):
        raise InputError(f"unexpected argument {extra[0]!r} (server flags go after --)")
    options = sweep_run.SweepOptions(
        models=tuple(models),
        server=server,
        topology=topology,
        scenarios=tuple(scenario or ()),
        space=space,
        strength=strength,
        budget_s=duration(budget) if budget is not None else None,
        shard=shard,
        minimize=minimize,
        repeats=repeat,
        releases=tuple(release) if release else None,
        shrink=shrink,
        device=device,
        inject=inject,
        fault_file=fault_file,
        workload=sweep_run.Workload(requests, prompt_tokens, max_new_tokens, concurrency, seed),
        output_dir=output_dir,
        timeout_s=timeout,
        extra_args=extra,
    )
    sweep_run.SweepRun(options, plan_only=plan_only, json_out=json_out, junit_path=junit_path, html_path=html_path)()
