"""The Typer application: one small module per command, each imported only when its command runs.

Every command is registered here by name (:data:`COMMANDS`, :data:`BENCH_COMMANDS`) and built by
Typer, from its module's function, the first time a group looks it up: ``kvdoctor inspect`` imports
``kvdoctor.cli.inspect_cmd`` and nothing of the other commands (no pd-eval planner, no torch
benchmark, no vLLM rule model for an SGLang question). Listing every command (``kvdoctor -h``,
completion of a command name) builds them all, so help and completion read exactly what Typer would
have built up front. Command modules import the floors below them lazily too, inside the command
function, so that ``kvdoctor inspect`` never pays for (or needs) torch and triton;
``kvdoctor bench startup`` measures what start-up costs.
"""

from __future__ import annotations

import gc
import importlib
import inspect
import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, ClassVar

from kvdoctor.cli.errors import debug_enabled, startup_guard

with startup_guard():  # Ctrl-C while typer imports: one line, exit 130
    import typer
    from typer.core import TyperGroup

# Commands that take SGLang server flags accept options kvdoctor itself does not define; each checks
# them against SGLang's own flag list (kvdoctor.cli.server_args), so a typo is refused, not passed on.
PASSTHROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}
HELP_OPTIONS = ["-h", "--help"]


@dataclass(frozen=True)
class Lazy:
    """One command as ``app.command(NAME, cls=..., context_settings=...)(module.function)`` registers it, unimported.

    ``cls`` names a command class in the same module (``pd-eval``'s ``PdEvalCommand``).
    """

    name: str
    module: str
    function: str
    context_settings: dict[str, Any] | None = None
    cls: str | None = None

    def register(self, group: typer.Typer) -> None:
        """``group.command(NAME, ...)(function)`` as Typer documents it, the docstring :func:`reflowed` as help."""
        module = importlib.import_module(self.module)
        cls = getattr(module, self.cls) if self.cls else None
        function = getattr(module, self.function)
        help_text = reflowed(inspect.getdoc(function))
        group.command(self.name, cls=cls, context_settings=self.context_settings, help=help_text)(function)

    def build(self, rich_markup_mode: Any) -> Any:
        """The click command Typer builds from the function: same parameters, help and settings."""
        one = typer.Typer()
        self.register(one)
        return typer.main.get_command_from_info(
            one.registered_commands[0],
            pretty_exceptions_short=app.pretty_exceptions_short,
            rich_markup_mode=rich_markup_mode,
        )


def reflowed(help_text: str | None) -> str | None:
    """HELP_TEXT (a command's docstring) with each paragraph on one line, for rich to wrap at the terminal's width.

    Typer's rich help keeps a docstring's single line breaks in every paragraph after the first (and in the first,
    where a group's Commands panel lists it), so a paragraph wrapped at 120 columns in the source broke mid-sentence
    in ``--help`` at any other width. Paragraphs (split at
    blank lines) stay paragraphs; one that starts with ``\\b`` (click's keep-as-written mark), and anything after
    ``\\f``, is kept as written. ``tests/cli/test_help_texts.py`` reads every command's help at 80 and 120 columns.
    """
    if not help_text:
        return help_text
    body, cut, rest = inspect.cleandoc(help_text).partition("\f")
    paragraphs = [
        p if p.lstrip("\n").startswith("\b") else " ".join(line.strip() for line in p.splitlines() if line.strip())
        for p in body.split("\n\n")
    ]
    return "\n\n".join(paragraphs) + cut + rest


# In the order --help and completion list them.
COMMANDS = (
    Lazy("inspect", "kvdoctor.cli.inspect_cmd", "inspect", PASSTHROUGH),
    Lazy("roundtrip", "kvdoctor.cli.roundtrip", "roundtrip", PASSTHROUGH),
    Lazy("pd-eval", "kvdoctor.cli.pd_eval", "pd_eval", PASSTHROUGH, cls="PdEvalCommand"),
    Lazy("consistency", "kvdoctor.cli.consistency", "consistency", {"allow_extra_args": True}),
    Lazy("drift", "kvdoctor.cli.drift", "drift"),
    Lazy("faults", "kvdoctor.cli.faults_cmd", "faults"),
    Lazy("replay", "kvdoctor.cli.replay_cmd", "replay"),
    Lazy("sweep", "kvdoctor.cli.sweep_cmd", "sweep", {"allow_extra_args": True}),
    Lazy("schema", "kvdoctor.cli.schema_cmd", "schema"),
)
BENCH_COMMANDS = (
    Lazy("mxfp8", "kvdoctor.cli.bench_mxfp8", "bench_mxfp8"),
    Lazy("roundtrip", "kvdoctor.cli.bench_roundtrip", "bench_roundtrip", PASSTHROUGH),
    Lazy("pd-eval", "kvdoctor.cli.bench_pd_eval", "bench_pd_eval"),
    Lazy("startup", "kvdoctor.cli.bench_startup", "bench_startup"),
    Lazy("consistency", "kvdoctor.cli.bench_consistency", "bench_consistency", {"allow_extra_args": True}),
    Lazy("replay", "kvdoctor.cli.bench_replay", "bench_replay"),
)


# --- The cyclic garbage collector while kvdoctor starts ----------------------------------------------------
# Start-up makes tens of thousands of objects that live as long as the process (modules, classes, the rule
# tables) and next to no garbage, so the collector's passes over them while kvdoctor starts are wasted work
# (a fifth of inspect's own start-up CPU). main() pauses it until a command is looked up; a command resumes it
# then, before its body runs, unless it is one of SHORT_COMMANDS: bounded, pure-Python work that ends the
# process soon (inspect's rule model, which resumes it for an installed engine). --help and completion run
# paused too.
SHORT_COMMANDS = frozenset({"inspect"})
_gc_paused = False  # True while main() holds the collector paused
_stayed_short = False  # the last main() ended with the collector still paused: it ran short work only


def pause_gc() -> None:
    """Pause the cyclic collector for the start-up, when it runs (main() alone calls this)."""
    global _gc_paused
    if gc.isenabled():
        gc.disable()
        _gc_paused = True


def resume_gc() -> None:
    """Give the collector back, if main() paused it: before any command work that is not short."""
    global _gc_paused
    if _gc_paused:
        _gc_paused = False
        gc.enable()


def run() -> None:
    """The process's entry point (the console script and ``python -m kvdoctor``): :func:`main`, and on the way
    out of a run that stayed short every object still alive is frozen (``gc.freeze``) before the interpreter
    shuts down.

    After a short run (the collector paused throughout: inspect's rule model, help, bad input) what is alive is
    kvdoctor's own modules, classes and rule tables; the collector's last passes at shut-down would walk all of
    it to free nothing: about a fifth of ``kvdoctor inspect``'s CPU time (issue 17). Shut-down is otherwise
    unchanged: ``atexit`` handlers, module teardown and every stream's flush run as before, and the exit code is
    ``main()``'s. A command that resumed the collector (torch, Triton, an installed server) is never frozen:
    extension objects left to the last collection would be reported as leaked at exit (Triton's nanobind does).
    ``main()`` itself never freezes, so a caller that runs the CLI in-process keeps its collector as it was.
    """
    try:
        main()
    finally:
        if _stayed_short:
            gc.freeze()


class LazyCommands(MutableMapping[str, Any]):
    """A group's ``commands``: name -> click command, each lazy one built (imported) when first looked up.

    Membership, iteration and ``len`` read names only; ``commands[name]`` and ``commands.get(name)``
    build that one command. Lazy names come first, in their order, then the ones Typer built itself
    (the ``bench`` sub-group), as Typer lists registered commands before added groups.
    """

    def __init__(self, lazy: Mapping[str, Callable[[], Any]], built: Mapping[str, Any]) -> None:
        self._lazy = dict(lazy)
        self._built = dict(built)
        self._names = [*self._lazy, *(name for name in self._built if name not in self._lazy)]

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            if name not in self._lazy:
                raise KeyError(name)
            self._built[name] = self._lazy[name]()
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command
        if name not in self._names:
            self._names.append(name)

    def __delitem__(self, name: str) -> None:
        if name not in self._names:
            raise KeyError(name)
        self._names.remove(name)
        self._built.pop(name, None)
        self._lazy.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._names))

    def __len__(self) -> int:
        return len(self._names)

    def loaded(self) -> list[str]:
        """The names whose command has been built (its module imported)."""
        return [name for name in self._names if name in self._built]


class LazyGroup(TyperGroup):
    """A Typer group whose commands are :class:`Lazy` entries, built on first lookup."""

    lazy: ClassVar[tuple[Lazy, ...]] = ()

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = LazyCommands(
            {c.name: (lambda c=c: c.build(self.rich_markup_mode)) for c in self.lazy}, self.commands
        )

    def list_commands(self, ctx: Any) -> list[str]:
        """The names in order, without building any (Typer's own reads every command)."""
        return list(self.commands)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        """Typer's lookup of the command ARGS name; the collector resumed unless it is a short one."""
        name, command, rest = super().resolve_command(ctx, args)
        if ctx.parent is not None or name not in SHORT_COMMANDS:  # SHORT_COMMANDS name the root's commands
            resume_gc()
        return name, command, rest


def _environments() -> str:
    """The root help's epilog: which environment runs which command (``kvdoctor.core.environments``)."""
    from kvdoctor.core.environments import help_lines

    head = "Environments (each built by its make target; a command started without its server exits 2 naming it):"
    return "\n\n".join([head, *help_lines()])


class _Root(LazyGroup):
    lazy = COMMANDS

    @property
    def epilog(self) -> str:
        """Which environment runs which command, read only when a help screen is drawn (start-up imports nothing
        of ``kvdoctor.core``)."""
        return _environments()

    @epilog.setter
    def epilog(self, value: Any) -> None:
        """Click's constructor sets one; the root's is always the environments'."""


class _Bench(LazyGroup):
    lazy = BENCH_COMMANDS


# Completion is Typer's: --install-completion / --show-completion, driven by _KVDOCTOR_COMPLETE
# (tests/cli/test_completion.py runs it through the console script).
app = typer.Typer(
    name="kvdoctor",
    cls=_Root,
    help="Diagnose and regression-test how an inference server keeps KV-cache state alive.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": HELP_OPTIONS},
)
bench = typer.Typer(cls=_Bench, help="Side-by-side benchmarks (ratios measured in one run).", no_args_is_help=True)


def _version(value: bool) -> None:
    if value:
        from kvdoctor.cli.versions import version_lines  # kvdoctor's, then each server found (metadata only)

        typer.echo("\n".join(version_lines()))
        raise typer.Exit(0)


@app.callback()
def _root(
    show_version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print kvdoctor's version and exit."
    ),
) -> None:
    """Diagnose and regression-test how an inference server keeps KV-cache state alive."""


app.add_typer(bench, name="bench")


def _usage_line(exc: Exception) -> str:
    """A usage error (bad option value, unknown command) as kvdoctor's one line, with where to look."""
    from kvdoctor._exceptions import InputError, one_line

    ctx = getattr(exc, "ctx", None)
    hint = f" (see '{ctx.command_path} -h')" if ctx is not None else ""
    from kvdoctor.cli.usage_words import plain

    # One wording whichever typer parsed the value (0.28's click types or 0.29's pydantic): usage_words.
    message = plain(exc.format_message())  # type: ignore[attr-defined]
    return one_line(InputError(f"{message}{hint}"))


def main() -> None:
    """Console-script entry point: every outcome is an exit code, every failure one stderr line.

    Installed here, once, for every command: the guards on stdout and stderr (``kvdoctor.cli.streams``:
    output that cannot be delivered is exit 2, a reader that went away 141, and never exit 0; text the
    locale cannot encode is written in ASCII), SIGTERM as ``kvdoctor.Interrupted`` (143, ``kvdoctor:
    terminated``), and the refusal of a repeated single-valued option (``kvdoctor.cli.repeats``). A run
    that ends without its verdict leaves its JUnit error case (``kvdoctor.report.verdicts.unfinished``).
    """
    pause_gc()
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
        global _stayed_short
        _stayed_short = _gc_paused
        resume_gc()
    sys.exit(code)


def _said(exc: BaseException) -> int:
    """EXC's one stderr line (none for a quiet one) and its exit code."""
    from kvdoctor._exceptions import EXIT_SIGINT, Interrupted, KvdoctorError
    from kvdoctor.cli.errors import INTERRUPTED_LINE, error_line, say, signal_exit

    if isinstance(exc, KvdoctorError):
        say(error_line(exc), str(exc))
        return exc.exit_code
    if isinstance(exc, Interrupted):
        line, code = signal_exit(exc.signum)
        say(line)
        return code
    say(INTERRUPTED_LINE)
    return EXIT_SIGINT


def _run(argv: list[str]) -> int:
    """The command ARGV names, run; what it exits with."""
    from typer._click.exceptions import NoArgsIsHelpError

    from kvdoctor._exceptions import (
        EXIT_INPUT,
        EXIT_PASS,
        EXIT_SIGINT,
        InternalError,
        Interrupted,
        KvdoctorError,
        one_line,
    )
    from kvdoctor.cli.errors import INTERRUPTED_LINE, last_said, say
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
        code = EXIT_INPUT
    except (KvdoctorError, Interrupted, KeyboardInterrupt) as exc:  # outside every command's exit_on_error
        if debug_enabled():
            raise
        code = _said(exc)
    except Exception as exc:
        from typer.exceptions import TyperException

        if isinstance(exc, TyperException) and hasattr(exc, "format_message"):  # a click usage error
            print(_usage_line(exc), file=sys.stderr)
            code = getattr(exc, "exit_code", EXIT_INPUT)
        elif debug_enabled():
            raise
        else:  # escaped every command's exit_on_error: still a kvdoctor bug, still one line
            say(one_line(InternalError.wrap(exc)))
            code = InternalError.exit_code
    code = code if isinstance(code, int) else EXIT_PASS
    if code == EXIT_SIGINT and last_said() is None:  # click turned a Ctrl-C outside a command's guard
        say(INTERRUPTED_LINE)  # into a silent exit 130
    return code
