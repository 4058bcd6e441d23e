"""The Typer application: one small module per command, registered here.

Command modules import the floors below them lazily, inside the command function, so that
``kvdoctor inspect`` never pays for (or needs) torch and triton.
"""

from __future__ import annotations

import typer

from kvdoctor.cli import (
    bench_mxfp8,
    bench_pd_eval,
    bench_roundtrip,
    inspect_cmd,
    pd_eval,
    roundtrip,
)

# Commands that take SGLang server flags accept options kvdoctor itself does not define.
PASSTHROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}

app = typer.Typer(
    name="kvdoctor",
    help="Diagnose and regression-test how an inference server keeps KV-cache state alive.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
bench = typer.Typer(help="Side-by-side benchmarks (ratios measured in one run).", no_args_is_help=True)

app.command("inspect", context_settings=PASSTHROUGH)(inspect_cmd.inspect)
app.command("roundtrip", context_settings=PASSTHROUGH)(roundtrip.roundtrip)
app.command("pd-eval", context_settings=PASSTHROUGH)(pd_eval.pd_eval)
app.add_typer(bench, name="bench")
bench.command("mxfp8")(bench_mxfp8.bench_mxfp8)
bench.command("roundtrip", context_settings=PASSTHROUGH)(bench_roundtrip.bench_roundtrip)
bench.command("pd-eval")(bench_pd_eval.bench_pd_eval)


def main() -> None:
    """Console-script entry point."""
    app()
