"""What start-up imports: loading the CLI imports no command, and a command imports only its own floors.

Why it matters: ``inspect`` must start without torch (and cheaply: ``kvdoctor bench startup`` measures it
against the bare typer+rich floor), an SGLang question must import nothing of vLLM, and the vLLM
environment installs vLLM with ``--no-deps`` (no httpx, no psutil): a command module that imports
pd-eval's HTTP client at load time breaks ``kvdoctor inspect --server vllm`` there, though nothing it
runs needs httpx. Each check runs a fresh interpreter, so what this test session imported does not count.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kvdoctor.cli import app as cli_app

HEAVY = ("torch", "triton", "pandas", "pyarrow", "httpx", "psutil", "prometheus_client", "sglang", "vllm")
COMMAND_MODULES = sorted({c.module for c in (*cli_app.COMMANDS, *cli_app.BENCH_COMMANDS)})
# The report writers a run loads only when that report is asked for: JUnit (--junit; its writer compiles a
# 10 ms regex), the path checks and atomic writes (--junit or $GITHUB_STEP_SUMMARY), JSON (--json).
JUNIT_WRITER = ("kvdoctor.report.junit", "junitparser")
FILE_WRITERS = ("kvdoctor.report.target", "kvdoctor.report.atomic")
JSON_WRITER = ("kvdoctor.report.serialize",)


def _loaded(prefixes: tuple[str, ...], modules: list[str]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


def _modules_after(tmp_path: Path, *argv: str, env: Mapping[str, str] | None = None) -> list[str]:
    """sys.modules at the end of a fresh ``kvdoctor ARGV`` run through the console entry point (exit 0).

    The child writes no step summary unless ENV names one (a CI run's own ``$GITHUB_STEP_SUMMARY`` is dropped).
    """
    child_env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"} | dict(env or {})
    dump = tmp_path / "modules.json"
    code = (
        "import json, sys\n"
        "from kvdoctor.cli import app\n"
        f"sys.argv = ['kvdoctor', *{list(argv)!r}]\n"
        "try:\n"
        "    app.main()\n"
        "except SystemExit as exc:\n"
        "    status = exc.code\n"
        f"open({str(dump)!r}, 'w').write(json.dumps({{'status': status, 'modules': sorted(sys.modules)}}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False, env=child_env
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(dump.read_text())
    assert result["status"] == 0, out.stderr  # the command ran to its answer: its imports are the real ones
    return result["modules"]


def test_loading_the_cli_and_every_command_imports_no_heavy_module() -> None:
    """Every command module built, as ``kvdoctor -h`` and completion build them: still nothing heavy."""
    code = (
        "import sys, typer\n"
        "from kvdoctor.cli.app import app\n"
        "root = typer.main.get_command(app)\n"
        "for group in (root, root.commands['bench']):\n"
        "    for name in group.commands:\n"
        "        group.commands[name]\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_building_the_cli_imports_no_command_module() -> None:
    """The click tree Typer builds (what every run starts with) names the commands without importing them."""
    code = (
        "import json, sys, typer\n"
        "from kvdoctor.cli.app import app\n"
        "root = typer.main.get_command(app)\n"
        "names = list(root.commands), list(root.commands['bench'].commands)\n"
        "print(json.dumps([names, sorted(m for m in sys.modules if m.startswith('kvdoctor.'))]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    (top, bench), modules = json.loads(out.stdout)
    assert top == [
        "inspect",
        "roundtrip",
        "pd-eval",
        "consistency",
        "drift",
        "faults",
        "replay",
        "sweep",
        "schema",
        "bench",
    ]
    assert bench == ["mxfp8", "roundtrip", "pd-eval", "startup", "consistency", "replay"]
    assert set(COMMAND_MODULES).isdisjoint(modules), modules
    assert not _loaded(("kvdoctor.core", "kvdoctor.engines", "kvdoctor.pd", "kvdoctor.report"), modules), modules


def test_inspect_on_an_sglang_question_imports_nothing_of_vllm(tmp_path: Path) -> None:
    modules = _modules_after(tmp_path, "inspect", "inkling-small")
    assert "kvdoctor.core.sglang.analysis" in modules  # it did answer, from SGLang's rule model
    assert _loaded(("kvdoctor.core.vllm", "vllm", "kvdoctor.engines.vllm", "kvdoctor.cli.render.vllm"), modules) == []
    assert _loaded(("torch", "triton", "sglang", "kvdoctor.engines.sglang", "kvdoctor.pd", "httpx"), modules) == []
    others = [m for m in COMMAND_MODULES if m != "kvdoctor.cli.inspect_cmd"]
    assert _loaded(tuple(others), modules) == []  # only its own command module was imported


def test_inspect_starts_without_what_only_other_runs_need(tmp_path: Path) -> None:
    """What ``kvdoctor bench startup`` found to cost inspect's start-up most, kept out of a plain run:
    pydantic (typer 0.29 checks every option value with it; constraints/ pin 0.28.0, which does not),
    package metadata (importlib.metadata: email, zipfile, csv; only an engine or --json names versions),
    and the --engine sglang answer types (``inspect_result`` makes them on first use)."""
    modules = _modules_after(tmp_path, "inspect", "inkling-small", "--kv-cache-dtype", "mxfp8")
    assert _loaded(("pydantic", "importlib.metadata"), modules) == []
    code = (
        "import sys\n"
        "from kvdoctor.cli import app\n"
        "sys.argv = ['kvdoctor', 'inspect', 'inkling-small']\n"
        "try:\n"
        "    app.main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "made = vars(sys.modules['kvdoctor.core.sglang.inspect_result'])\n"
        "from kvdoctor.core.sglang.inspect_result import ENGINE_ANSWER_TYPES\n"
        "print([name for name in ENGINE_ANSWER_TYPES if name in made], file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stderr.strip().splitlines()[-1] == "[]", out.stderr


def test_a_plain_inspect_loads_no_report_writer_and_nothing_of_vllm(tmp_path: Path) -> None:
    """Tables and the verdict line only: no JUnit writer, no path checks, no JSON writer, no vLLM analysis.

    Each was imported by every ``inspect`` through the shared reporters (``report.verdicts`` and
    ``report.inspect_report`` imported ``junit`` at load time, ``report.envelope`` the JSON writer)."""
    modules = _modules_after(tmp_path, "inspect", "inkling-small")
    assert "kvdoctor.core.sglang.inspect_result" in modules  # it did answer, and published its verdict
    assert "kvdoctor.report.verdicts" in modules  # the unfinished-run record was kept, as in every run
    assert _loaded((*JUNIT_WRITER, *FILE_WRITERS, *JSON_WRITER), modules) == []
    assert _loaded(("kvdoctor.core.vllm", "kvdoctor.cli.render.vllm"), modules) == []


def test_each_report_writer_loads_when_its_report_is_asked_for(tmp_path: Path) -> None:
    """The same writers are there, and write, when the run asks for their report."""
    junit_file = tmp_path / "inspect.xml"
    modules = _modules_after(tmp_path, "inspect", "inkling-small", "--junit", str(junit_file))
    assert set(JUNIT_WRITER) | set(FILE_WRITERS) <= set(modules)
    assert _loaded(JSON_WRITER, modules) == []
    assert 'name="no-error-hazards"' in junit_file.read_text()

    summary = tmp_path / "summary.md"
    modules = _modules_after(tmp_path, "inspect", "inkling-small", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert set(FILE_WRITERS) <= set(modules)
    assert _loaded(("junitparser",), modules) == []  # no --junit: no JUnit file made (the rows read junit's words)
    assert "| family | inkling |" in summary.read_text()  # the model's fact rows, made when the summary is

    modules = _modules_after(tmp_path, "inspect", "inkling-small", "--json")
    assert set(JSON_WRITER) <= set(modules)
    assert _loaded(JUNIT_WRITER, modules) == []


def test_inspect_json_on_an_sglang_question_imports_nothing_of_vllm(tmp_path: Path) -> None:
    """--json publishes through the same step-summary rows, which tell a vLLM report apart."""
    modules = _modules_after(tmp_path, "inspect", "inkling-small", "--json")
    assert _loaded(("kvdoctor.core.vllm", "vllm"), modules) == []


def test_inspect_for_vllm_imports_no_sglang_engine_and_no_torch(tmp_path: Path) -> None:
    """``--server vllm``: vLLM's rule model answers, with no server, torch or pd-eval module."""
    modules = _modules_after(tmp_path, "inspect", "llama-3.1-8b", "--server", "vllm")
    assert "kvdoctor.core.vllm.analysis" in modules  # it did answer, from vLLM's rule model
    assert _loaded(("vllm", "sglang", "kvdoctor.engines.vllm", "kvdoctor.engines.sglang"), modules) == []
    assert _loaded(("torch", "triton", "kvdoctor.pd", "httpx"), modules) == []
    others = [m for m in COMMAND_MODULES if m not in ("kvdoctor.cli.inspect_cmd", "kvdoctor.cli.render.vllm")]
    assert _loaded(tuple(others), modules) == []


def test_inspect_for_vllm_imports_nothing_of_sglangs_rule_model(tmp_path: Path) -> None:
    """A vLLM question loads nothing of SGLang's rule model, in tables or JSON (issue 29: it loaded all of it,
    ~40 modules, through the shared hazards table's imports and the verdict's ``ungated``), and a launch line
    without an option loads no vLLM flag table (1,900 generated lines); a line with a flag still reads it."""
    for argv in (
        ("inspect", "llama-3.1-8b", "--server", "vllm"),
        ("inspect", "llama-3.1-8b", "--server", "vllm", "--json"),
    ):
        modules = _modules_after(tmp_path, *argv)
        assert "kvdoctor.core.vllm.analysis" in modules  # it did answer, from vLLM's rule model
        assert _loaded(("kvdoctor.core.sglang",), modules) == [], argv
        assert _loaded(("kvdoctor.core.vllm._generated.server_flags",), modules) == [], argv
    flagged = _modules_after(tmp_path, "inspect", "llama-3.1-8b", "--server", "vllm", "--block-size", "32")
    assert "kvdoctor.core.vllm._generated.server_flags" in flagged  # the flag went through vLLM's vocabulary


def test_a_group_lists_its_commands_without_building_them() -> None:
    """Listing names (help's order, completion) builds nothing; looking one up builds that one alone."""
    root = typer.main.get_command(cli_app.app)
    ctx = typer.Context(root)
    assert root.list_commands(ctx) == [*(c.name for c in cli_app.COMMANDS), "bench"]
    assert root.commands.loaded() == ["bench"]  # the sub-group Typer built itself; no command yet
    assert root.get_command(ctx, "drift").name == "drift"
    assert root.commands.loaded() == ["drift", "bench"]
    assert root.get_command(ctx, "no-such-command") is None


def _eager_app() -> typer.Typer:
    """The same app registered the way Typer documents it: every command imported and added up front (its help the
    docstring reflowed, as ``kvdoctor.cli.app.reflowed`` shows every command's)."""
    import importlib
    import inspect

    def add(group: typer.Typer, lazy: cli_app.Lazy) -> None:
        module = importlib.import_module(lazy.module)
        cls = getattr(module, lazy.cls) if lazy.cls else None
        function = getattr(module, lazy.function)
        help_text = cli_app.reflowed(inspect.getdoc(function))
        group.command(lazy.name, cls=cls, context_settings=lazy.context_settings, help=help_text)(function)

    app = typer.Typer(
        name="kvdoctor",
        help=cli_app.app.info.help,
        epilog=cli_app._environments(),
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": cli_app.HELP_OPTIONS},
    )
    app.callback()(cli_app._root)
    for lazy in cli_app.COMMANDS:
        add(app, lazy)
    bench = typer.Typer(help=cli_app.bench.info.help, no_args_is_help=True)
    for lazy in cli_app.BENCH_COMMANDS:
        add(bench, lazy)
    app.add_typer(bench, name="bench")
    return app


def test_lazy_help_is_the_help_typer_builds_up_front() -> None:
    """Every help screen of the lazy app, byte for byte the eager app's (80 columns, no colour)."""
    eager = _eager_app()
    screens = [["-h"], ["bench", "-h"]]
    screens += [[c.name, "-h"] for c in cli_app.COMMANDS] + [["bench", c.name, "-h"] for c in cli_app.BENCH_COMMANDS]
    env = {"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"}
    for argv in screens:
        lazy_out = CliRunner().invoke(cli_app.app, argv, env=env, prog_name="kvdoctor")
        eager_out = CliRunner().invoke(eager, argv, env=env, prog_name="kvdoctor")
        assert lazy_out.exit_code == eager_out.exit_code == 0, (argv, lazy_out.output)
        assert lazy_out.output == eager_out.output, argv


@pytest.mark.parametrize(
    "argv", [["inspect", "inkling-small"], ["inspect", "llama-3.1-8b", "--server", "vllm"]], ids=["sglang", "vllm"]
)
def test_a_plain_inspect_makes_its_classes_as_records(tmp_path: Path, argv: list[str]) -> None:
    """Every kvdoctor dataclass a plain ``inspect`` loads, for either server, is a ``kvdoctor.core.record`` (no
    compiled __repr__, __eq__, __hash__, __setattr__, __delattr__: ~1 ms a class of start-up, issues 17 and 29),
    and the value grammars of ``core/flag_values`` are compiled only when a launch line has such a value. A
    ``@dataclass`` put back on that path, or a grammar compiled at import again, turns this red."""
    code = (
        "import dataclasses, sys\n"
        "from kvdoctor.cli import app\n"
        f"sys.argv = ['kvdoctor', *{argv!r}]\n"
        "try:\n"
        "    app.main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "made = [f'{v.__module__}.{v.__qualname__}' for name, m in list(sys.modules.items())"
        " if name.startswith('kvdoctor') for v in vars(m).values()"
        " if isinstance(v, type) and v.__module__ == name and dataclasses.is_dataclass(v)"
        " and '__kvdoctor_record_frozen__' not in vars(v)]\n"
        "from kvdoctor.core import flag_values\n"
        "print(sorted(set(made)), flag_values.sglang_human.cache_info().currsize, file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    # cli/app.py's one class stays a dataclass: building the CLI imports nothing of kvdoctor.core (above).
    assert out.stderr.strip().splitlines()[-1] == "['kvdoctor.cli.app.Lazy'] 0", out.stderr


def test_a_plain_inspect_builds_no_flag_parser_and_no_torch_command_enum(tmp_path: Path) -> None:
    """A launch line without a modelled server flag reads ServerFlags' defaults without building kvdoctor's
    argparse parser (argparse and ~40 add_argument calls: ~5 ms, issue 17), one without an option loads no
    SGLang flag table, and ``cli/options`` makes the torch commands' ``--device`` enum (``kvdoctor.choices``)
    only when such a command imports it. Building the parser, the table or the enums at import again turns this
    red; a modelled flag still builds the parser."""
    plain = _modules_after(tmp_path, "inspect", "inkling-small")
    assert _loaded(("argparse", "kvdoctor.choices", "kvdoctor.core.sglang._generated.server_flags"), plain) == []
    flagged = _modules_after(tmp_path, "inspect", "inkling-small", "--page-size", "16")
    assert "argparse" in flagged  # the modelled flag went through the parser


def test_the_parser_free_path_reads_what_the_parser_reads() -> None:
    """The vocabulary's modelled spellings are the parser's own, and a launch line without a modelled flag
    gives exactly the parser's defaults (what ``parse_flags`` returned when it always parsed)."""
    from dataclasses import fields

    from kvdoctor.core.sglang import flags

    parser = flags._parser()
    assert flags.SGLANG.modelled == flags._modelled_options(parser)
    defaults = vars(parser.parse_args([]))
    defaults["tp_size"] = 1  # parse_flags' reading of an absent --tp-size
    names = {f.name for f in fields(flags.ServerFlags)}
    expected = flags.ServerFlags(
        **{k: v for k, v in defaults.items() if k in names}, not_modelled=("--log-level info",)
    )
    assert flags.parse_flags(["--log-level", "info"]) == expected
    words = ["inkling-small", "extra"]  # what split_launcher leaves of a line without an option
    assert flags._scan(words, ()) == flags.scan(words, flags.SGLANG)  # no option: the vocabulary is not needed


def test_device_option_is_the_device_enum_when_a_torch_command_imports_it() -> None:
    from typing import get_args

    from kvdoctor.choices import Device
    from kvdoctor.cli import options

    kind, option = get_args(options.DeviceOption)
    assert kind is Device and option.help.startswith("Where the work runs")
    assert options.DeviceOption is options.DeviceOption  # made once
