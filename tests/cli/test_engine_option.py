"""``--engine`` on the CLI where SGLang may be missing: the choice is checked, the fix is named."""

from __future__ import annotations

import importlib.util

import pytest
from typer.testing import CliRunner

from kvdoctor.cli.app import app

runner = CliRunner()


def test_unknown_engine_is_bad_input() -> None:
    out = runner.invoke(app, ["roundtrip", "inkling-small", "--engine", "vllm-nope"])
    assert out.exit_code == 2
    assert "Traceback" not in out.output


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="SGLang is installed here")
def test_engine_sglang_without_sglang_names_the_install_command() -> None:
    out = runner.invoke(app, ["roundtrip", "inkling-small", "--engine", "sglang", "--device", "cpu"])
    assert out.exit_code == 2, out.output
    assert "make sglang-env" in out.output
    assert "Traceback" not in out.output


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="SGLang is installed here")
@pytest.mark.parametrize(
    "args",
    [["inspect", "inkling-small", "--engine", "sglang"], ["drift", "--fixture", "inkling-small"]],
    ids=["inspect", "drift"],
)
def test_commands_that_ask_sglang_name_the_install_command(args: list[str]) -> None:
    out = runner.invoke(app, args)
    assert out.exit_code == 2, out.output
    assert "make sglang-env" in out.output
    assert "Traceback" not in out.output


def test_inspect_without_engine_never_imports_an_engine_adapter() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from typer.testing import CliRunner; from kvdoctor.cli.app import app; "
        "r = CliRunner().invoke(app, ['inspect', 'inkling-small']); "
        "print(sorted(m for m in sys.modules if m.startswith(('kvdoctor.engines.sglang', 'sglang', 'torch'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_version_prints_the_installed_version() -> None:
    from importlib.metadata import version

    out = runner.invoke(app, ["--version"])
    assert out.exit_code == 0
    assert out.output.splitlines()[0] == f"kvdoctor {version('kvdoctor')}"  # then the servers (tests/cli/test_versions)


def test_sglangs_answers_render_literally_and_whole_at_80_columns() -> None:
    """Outside text (SGLang's messages, stubs, values) is data, never markup, and is never cut with "…"."""
    import io

    from rich.console import Console

    from kvdoctor.cli.render.sglang import render_beside
    from kvdoctor.core.engine_ref import EngineRef
    from kvdoctor.core.sglang.inspect_result import FieldDrift, LiveRefusal, SglangAnswers

    answers = SglangAnswers(
        engine=EngineRef("sglang", "0.5.23", None),
        stubs=("platform [/oops] [bold]facts[/bold]",),
        refusal=LiveRefusal("tree cache", "Host-pool retraction does not support Mamba models. (registry.py:156)"),
        fields={"kv_pool": ["SWAKVPoolWithAVeryLongClassNameIndeed", "KVCache"], "hicache_ratio": None},
        skipped={"hicache_ratio": "kvdoctor has no pool size for this launch (pass --max-total-tokens)"},
        kvdoctor={"kv_pool": "SWAKVPool", "hicache_ratio": 2.0},
        kvdoctor_refusal=None,
        drift=(FieldDrift("kv_pool", "SWAKVPool", "SWAKVPoolWithAVeryLongClassNameIndeed"),),
    )
    buffer = io.StringIO()
    render_beside(answers, Console(file=buffer, width=80, no_color=True, emoji=False, force_terminal=False))
    text = buffer.getvalue()
    assert "platform [/oops] [bold]facts[/bold]" in text
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    assert "SGLang 0.5.23 (live, –)" in text  # no "None" where a path is unknown
    assert "None" not in text and "agree: not asked: kvdoctor has no pool size" in " ".join(
        text.replace("│", " ").split()
    )
    drift = "KVD015-RULES-DRIFT kv_pool: kvdoctor SWAKVPool, SGLang SWAKVPoolWithAVeryLongClassNameIndeed"
    assert drift in " ".join(text.split())


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="SGLang is installed here")
@pytest.mark.parametrize(
    "args",
    [
        ["inspect", "inkling-small", "--engine", "sglang"],
        ["roundtrip", "inkling-small", "--engine", "sglang", "--device", "cpu"],
        ["drift", "--fixture", "inkling-small"],
    ],
    ids=["inspect", "roundtrip", "drift"],
)
def test_a_missing_sglang_is_said_before_torch_is_imported(args: list[str]) -> None:
    """Issue 43 (8): ``--engine sglang`` took 3.5 s to say SGLang is missing (torch imported first), vLLM 0.3 s."""
    import subprocess
    import sys

    code = (
        "import sys; from typer.testing import CliRunner; from kvdoctor.cli.app import app; "
        f"r = CliRunner().invoke(app, {args!r}); "
        "print(r.exit_code, sorted(m for m in sys.modules if m == 'torch'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split("\n")[-2] == "2 []", out.stdout
