"""The Typer application: one small module per command, registered here.

Command modules import the floors below them lazily, inside the command function, so that
``kvdoctor inspect`` never pays for (or needs) torch and triton.
"""

from __future__ import annotations

import sys

from kvdoctor.cli.errors import debug_enabled, startup_guard

with startup_guard():  # Ctrl-C while typer and the commands import: one line, exit 130
    import typer

    from kvdoctor.cli import (
        bench_mxfp8,
        bench_pd_eval,
        bench_roundtrip,
        consistency,
        drift,
        inspect_cmd,
        pd_eval,
        roundtrip,
        schema_cmd,
    )

# Commands that take SGLang server flags accept options kvdoctor itself does not define; each checks
# them against SGLang's own flag list (kvdoctor.cli.server_args), so a typo is refused, not passed on.
PASSTHROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}
HELP_OPTIONS = ["-h", "--help"]

# Completion is Typer's: --install-completion / --show-completion, driven by _KVDOCTOR_COMPLETE
# (tests/cli/test_completion.py runs it through the console script).
app = typer.Typer(
    name="kvdoctor",
    help="Diagnose and regression-test how an inference server keeps KV-cache state alive.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": HELP_OPTIONS},
)
bench = typer.Typer(help="Side-by-side benchmarks (ratios measured in one run).", no_args_is_help=True)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        from kvdoctor import __version__

        try:
            installed = version("kvdoctor")
        except PackageNotFoundError:
            installed = __version__
        typer.echo(f"kvdoctor {installed}")
        raise typer.Exit(0)


@app.callback()
def _root(
    show_version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print kvdoctor's version and exit."
    ),
) -> None:
    """Diagnose and regression-test how an inference server keeps KV-cache state alive."""


app.command("inspect", context_settings=PASSTHROUGH)(inspect_cmd.inspect)
app.command("roundtrip", context_settings=PASSTHROUGH)(roundtrip.roundtrip)
app.command("pd-eval", cls=pd_eval.PdEvalCommand, context_settings=PASSTHROUGH)(pd_eval.pd_eval)
app.command("consistency", context_settings={"allow_extra_args": True})(consistency.consistency)
app.command("drift")(drift.drift)
app.command("schema")(schema_cmd.schema)
app.add_typer(bench, name="bench")
bench.command("mxfp8")(bench_mxfp8.bench_mxfp8)
bench.command("roundtrip", context_settings=PASSTHROUGH)(bench_roundtrip.bench_roundtrip)
bench.command("pd-eval")(bench_pd_eval.bench_pd_eval)


def _usage_line(exc: Exception) -> str:
    """A usage error (bad option value, unknown command) as kvdoctor's one line, with where to look."""
    from kvdoctor._exceptions import InputError, one_line

    ctx = getattr(exc, "ctx", None)
    hint = f" (see '{ctx.command_path} -h')" if ctx is not None else ""
    # Typer phrases a bad enum value through its validation layer ("Value error, 'gpu' is not one of
    # …"): that prefix names the machinery, not the mistake, so the line drops it.
    message = exc.format_message().replace("Value error, ", "")  # type: ignore[attr-defined]
    return one_line(InputError(f"{message}{hint}"))


def main() -> None:
    """Console-script entry point: every outcome is an exit code, every failure one stderr line.

    Installed here, once, for every command: the guards on stdout and stderr (``kvdoctor.cli.streams``:
    output that cannot be delivered is exit 2, a reader that went away 141, and never exit 0; text the
    locale cannot encode is written in ASCII), SIGTERM as ``kvdoctor.Interrupted`` (143, ``kvdoctor:
    terminated``), and the refusal of a repeated single-valued option (``kvdoctor.cli.repeats``). A run
    that ends without its verdict leaves its JUnit error case (``kvdoctor.report.verdicts.unfinished``).
    """
    from kvdoctor.cli import streams
    from kvdoctor.cli.errors import forget, last_said, signals_handled
    from kvdoctor.report import verdicts
    from kvdoctor.report.envelope import record_argv

    forget()
    verdicts.forget()
    record_argv(sys.argv[1:])  # the exact command line every --json report carries
    try:
        with streams.guarded() as stdout, signals_handled():
            code = _run(sys.argv[1:])
            lost = stdout.lost()
            if lost is not None and code in (0, 1):  # written, then swallowed somewhere: never a green exit
                code = _said(lost)
            verdicts.unfinished(code, last_said())
    finally:
        record_argv(None)
    sys.exit(code)


def _said(exc: BaseException) -> int:
    """EXC's one stderr line (none for a quiet one) and its exit code."""
    from kvdoctor._exceptions import Interrupted, KvdoctorError
    from kvdoctor.cli.errors import INTERRUPTED_EXIT, INTERRUPTED_LINE, error_line, say, signal_exit

    if isinstance(exc, KvdoctorError):
        say(error_line(exc), str(exc))
        return exc.exit_code
    if isinstance(exc, Interrupted):
        line, code = signal_exit(exc.signum)
        say(line)
        return code
    say(INTERRUPTED_LINE)
    return INTERRUPTED_EXIT


def _run(argv: list[str]) -> int:
    """The command ARGV names, run; what it exits with."""
    from typer._click.exceptions import NoArgsIsHelpError

    from kvdoctor._exceptions import InternalError, Interrupted, KvdoctorError, one_line
    from kvdoctor.cli.errors import INTERRUPTED_EXIT, INTERRUPTED_LINE, last_said, say
    from kvdoctor.cli.repeats import refuse_repeated

    try:
        command = typer.main.get_command(app)
        refuse_repeated(command, argv)
        # prog_name fixed: `python -m kvdoctor` and the console script read the same completion variable
        # (_KVDOCTOR_COMPLETE, which the script --install-completion writes sets) and show one usage line.
        code = command.main(args=argv, prog_name="kvdoctor", standalone_mode=False)
    except NoArgsIsHelpError as exc:  # `kvdoctor` alone: typer's own help screen, as standalone shows it
        from typer import rich_utils

        rich_utils.rich_format_error(exc)
        code = exc.exit_code
    except typer.Abort:  # typer's main() raises it for an EOF (its Ctrl-C is the silent Exit(130) below)
        say("kvdoctor: error: aborted (end of input)")  # no verdict was reached: exit 1 would read "a gate failed"
        code = 2
    except (KvdoctorError, Interrupted, KeyboardInterrupt) as exc:  # outside every command's exit_on_error
        if debug_enabled():
            raise
        code = _said(exc)
    except Exception as exc:
        from typer.exceptions import TyperException

        if isinstance(exc, TyperException) and hasattr(exc, "format_message"):  # a click usage error
            print(_usage_line(exc), file=sys.stderr)
            code = getattr(exc, "exit_code", 2)
        elif debug_enabled():
            raise
        else:  # escaped every command's exit_on_error: still a kvdoctor bug, still one line
            say(one_line(InternalError.wrap(exc)))
            code = InternalError.exit_code
    code = code if isinstance(code, int) else 0
    if code == INTERRUPTED_EXIT and last_said() is None:  # click turned a Ctrl-C outside a command's guard
        say(INTERRUPTED_LINE)  # into a silent exit 130
    return code
