"""The CLI contract under hostile input: every case ends in its exit code and one stderr line.

0 green · 1 a gate failed · 2 bad input · 3 a deployment failed · 4 kvdoctor itself failed. Most cases
run the console-script entry point (``kvdoctor.cli.app.main``) in-process, which is exactly what the
installed ``kvdoctor`` runs; start-up interrupts need a fresh interpreter and run in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kvdoctor.cli import app as cli_app
from kvdoctor.core.config import load_config


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str

    def one_line(self) -> str:
        """The single stderr line, asserting there is exactly one and no traceback."""
        assert "Traceback" not in self.err and "Traceback" not in self.out, self.err
        lines = self.err.splitlines()
        assert len(lines) == 1, self.err
        return lines[0]


Run = Callable[..., Outcome]


@pytest.fixture
def kvdoctor(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Run:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("KVDOCTOR_DEBUG", raising=False)

    def run(*args: str) -> Outcome:
        monkeypatch.setattr(sys, "argv", ["kvdoctor", *args])
        with pytest.raises(SystemExit) as done:
            cli_app.main()
        captured = capsys.readouterr()
        return Outcome(int(done.value.code or 0), captured.out, captured.err)

    return run


def _config(tmp_path: Path, fixture: str, name: str = "config.json", **changes: Any) -> str:
    top = dict(load_config(fixture).top)
    target = top.get("text_config", top)
    target.update(changes)
    path = tmp_path / name
    path.write_text(json.dumps(top), encoding="utf-8")
    return str(path)


# --- Exit 2: a typo must not switch a gate off, and a stray word is not a server flag ---

TYPOS = [
    (["inspect", "inkling-small", "--strcit"], "did you mean --strict?"),
    (["inspect", "inkling-small", "--jsn"], "did you mean --json?"),
    (["roundtrip", "inkling-small", "--injct", "missing-mamba"], "did you mean --inject?"),
    (["bench", "roundtrip", "--tokns", "8"], "did you mean --tokens?"),
    (["inspect", "inkling-small", "--kv-cache-dtpye", "mxfp8"], "did you mean --kv-cache-dtype?"),
    (["inspect", "inkling-small", "stray"], "unexpected argument 'stray' after MODEL 'inkling-small'"),
    (["inspect", "inkling-small", "--cuda-graph-bs", "4"], "ambiguous option: --cuda-graph-bs could match"),
    (["inspect", "inkling-small", "--quantization"], "argument --quantization: expected one argument"),
    (["inspect", "inkling-small", "--trust-remote-code=yes"], "ignored explicit argument 'yes'"),
    (["inspect", "--model-path", "inkling-small", "qwen3-8b"], "name different models"),
    (
        ["inspect", "inkling-small", "--", "python", "-m", "sglang.launch_server", "--json"],
        "--json is kvdoctor's own option: put it before '--'",
    ),
    (["frob"], "No such command 'frob'"),
    (["roundtrip", "inkling-small", "--requests", "1" + "0" * 5000], "Invalid value for '--requests'"),
    (["inspect", "inkling-small", "--page-size", "1" + "0" * 5000], "argument --page-size: invalid"),
]


@pytest.mark.parametrize(("args", "message"), TYPOS)
def test_unknown_options_and_stray_words_exit_2(kvdoctor: Run, args: list[str], message: str) -> None:
    result = kvdoctor(*args)
    assert result.code == 2
    line = result.one_line()
    assert line.startswith("kvdoctor: error: ") and message in line


def test_a_real_sglang_flag_kvdoctor_does_not_model_is_listed_not_refused(kvdoctor: Run) -> None:
    result = kvdoctor("inspect", "inkling-small", "--trust-remote", "--quantization", "fp8", "--json")
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert report["not_modelled_flags"] == ["--trust-remote-code", "--quantization fp8"]  # abbreviation expanded
    assert "KVD009-FLAGS-NOT-MODELLED" in {h["code"] for h in report["hazards"]}


# --- A pasted launch line, and -h everywhere ---

PASTED = [
    ["--model-path", "inkling-small", "--kv-cache-dtype", "mxfp8", "--disaggregation-mode", "decode"],
    ["--kv-cache-dtype", "mxfp8", "--model", "inkling-small", "--disaggregation-mode", "decode"],
    ["--kv-cache-dtype", "mxfp8", "inkling-small", "--disaggregation-mode", "decode"],
    [
        "--",
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "inkling-small",
        "--kv-cache-dtype",
        "mxfp8",
        "--disaggregation-mode=decode",
    ],
    [
        "inkling-small",
        "--",
        "CUDA_VISIBLE_DEVICES=0",
        "/usr/bin/python3",
        "-m",
        "sglang.launch_server",
        "--model",
        "inkling-small",
        "--kv-cache-dtype",
        "mxfp8",
        "--disaggregation-mode",
        "decode",
    ],
    ["--", "sglang", "serve", "inkling-small", "--kv-cache-dtype", "mxfp8", "--disaggregation-mode", "decode"],
]


@pytest.mark.parametrize("words", PASTED)
def test_a_pasted_launch_line_reads_like_model_then_flags(kvdoctor: Run, words: list[str]) -> None:
    plain = kvdoctor(
        "inspect", "inkling-small", "--kv-cache-dtype", "mxfp8", "--disaggregation-mode", "decode", "--json"
    )
    pasted = kvdoctor("inspect", "--json", *words)
    assert pasted.code == 0, pasted.err
    run_facts = ("command_line", "timestamp")  # the run header: how and when, not what was found
    pasted_report = {k: v for k, v in json.loads(pasted.out).items() if k not in run_facts}
    assert pasted_report == {k: v for k, v in json.loads(plain.out).items() if k not in run_facts}


@pytest.mark.parametrize(
    "command", [[], ["inspect"], ["roundtrip"], ["pd-eval"], ["bench"], ["bench", "roundtrip"], ["bench", "mxfp8"]]
)
def test_dash_h_is_help_everywhere(kvdoctor: Run, command: list[str]) -> None:
    result = kvdoctor(*command, "-h")
    assert result.code == 0, result.err
    assert "Usage" in result.out


# --- Exit 2: configs that would have given a silent wrong answer ---

BAD_CONFIGS = [
    (
        "gpt-oss-20b",
        {"layer_types": ["sliding_attention", "full_attention", "sliding_attention"]},
        "field 'layer_types' has 3 entries for 24 layers",
    ),
    (
        "gpt-oss-20b",
        {"layer_types": ["sliding_attention", "ful_attention"] * 12},
        "unknown layer kind(s) ['ful_attention']",
    ),
    ("lfm2-1.2b", {"layer_types": "full_attention"}, "field 'layer_types' must be a list of strings"),
    ("lfm2-1.2b", {"layer_types": ["conv", "conv", "full_attention", "conv"] * 12}, "has 48 entries for 16 layers"),
    ("lfm2-1.2b", {"layer_types": ["conv", "sliding_attention"] * 8}, "unknown layer kind(s) ['sliding_attention']"),
    ("llama-3.1-8b", {"head_dim": -4}, "field 'head_dim' must be a positive integer, got -4"),
    ("llama-3.1-8b", {"num_key_value_heads": -4}, "field 'num_key_value_heads' must be a positive integer"),
    ("llama-3.1-8b", {"num_key_value_heads": 4.5}, "field 'num_key_value_heads' must be a whole number, got 4.5"),
    ("llama-3.1-8b", {"num_key_value_heads": True}, "field 'num_key_value_heads' must be a whole number, got True"),
    ("llama-3.1-8b", {"num_hidden_layers": 10**7}, "field 'num_hidden_layers' = 10,000,000 exceeds 10,000"),
    ("llama-3.1-8b", {"head_dim": 100_000}, "exceeds 8,192"),
    ("llama-3.1-8b", {"hidden_size": 10**9}, "field 'hidden_size' = 1,000,000,000 exceeds 1,000,000"),
    ("llama-3.1-8b", {"model_type": ["llama"]}, "field 'model_type' must be a non-empty string"),
    ("inkling-small", {"local_layer_ids": [0, 0, 1]}, "lists a layer twice"),
    ("nemotron-h-8b", {"hybrid_override_pattern": "M*" * 10}, "must have one of M * - E per layer (56)"),
]


@pytest.mark.parametrize(("fixture", "changes", "message"), BAD_CONFIGS)
def test_configs_no_real_model_has_exit_2_naming_file_and_field(
    kvdoctor: Run, tmp_path: Path, fixture: str, changes: dict[str, Any], message: str
) -> None:
    path = _config(tmp_path, fixture, **changes)
    result = kvdoctor("inspect", path)
    assert result.code == 2
    line = result.one_line()
    assert path in line and message in line


def test_tp_that_sglang_refuses_is_hazard_kvd014_with_the_analysis_shown(kvdoctor: Run) -> None:
    result = kvdoctor("inspect", "inkling-small", "--tp-size", "3", "--json")  # 4 KV heads
    assert result.code == 0, result.err  # a well-formed launch SGLang refuses: a finding, not bad input
    report = json.loads(result.out)
    refused = [h for h in report["hazards"] if h["code"] == "KVD014-SGLANG-REFUSES"]
    assert any("--tp-size 3 with 4 KV heads" in h["message"] and "divide" in h["message"] for h in refused)
    assert all(h["where"].startswith("sglang/srt/models/llama.py:") for h in refused) and report["components"]
    assert kvdoctor("inspect", "inkling-small", "--tp-size", "3", "--strict").code == 1
    assert kvdoctor("inspect", "inkling-small", "--tp-size", "8").code == 0  # 8 % 4 == 0: heads replicated


def test_tp_that_vllm_refuses_is_hazard_kvd114_never_a_pass(kvdoctor: Run) -> None:
    """vLLM's counterpart of the case above: Llama-3.1-8B at --tensor-parallel-size 3 used to pass with "2 heads"."""
    result = kvdoctor("inspect", "llama-3.1-8b", "--server", "vllm", "--tensor-parallel-size", "3", "--json")
    assert result.code == 0, result.err
    report = json.loads(result.out)
    refused = [h for h in report["hazards"] if h["code"] == "KVD114-VLLM-REFUSES"]
    assert any("Total number of attention heads (32) must be divisible" in h["message"] for h in refused)
    assert {h["where"].split(":")[0] for h in refused} == {
        "vllm/config/model.py",
        "vllm/model_executor/layers/linear.py",
    }
    assert report["verdict"] == "warn"
    assert kvdoctor("inspect", "llama-3.1-8b", "--server", "vllm", "-tp", "3", "--strict").code == 1
    assert kvdoctor("inspect", "llama-3.1-8b", "--server", "vllm", "-tp", "16", "--strict").code == 0


# --- Exit 2: a value the server's own parser refuses is not "not modelled" ---

BAD_VALUES = [
    (["llama-3.1-8b", "--mem-fraction-static", "abc"], "argument --mem-fraction-static: invalid float value: 'abc'"),
    (["llama-3.1-8b", "--mem-fraction-static=abc"], "argument --mem-fraction-static: invalid float value: 'abc'"),
    (["llama-3.1-8b", "--schedule-policy", "fifo"], "argument --schedule-policy: invalid choice: 'fifo'"),
    (["llama-3.1-8b", "--cuda-graph-bs-decode"], "argument --cuda-graph-bs-decode: expected at least one argument"),
    (["llama-3.1-8b", "--mem-fraction-static"], "argument --mem-fraction-static: expected one argument"),
    (["llama-3.1-8b", "--tp-size", "abc"], "--tensor-parallel-size: invalid positive integer value: 'abc'"),
    (
        ["llama-3.1-8b", "--server", "vllm", "--gpu-memory-utilization", "abc"],
        "argument --gpu-memory-utilization: invalid float value: 'abc'",
    ),
    (
        ["llama-3.1-8b", "--server", "vllm", "--max-model-len=abc"],
        "argument --max-model-len: invalid human_readable_int_or_auto value: 'abc'",
    ),
    (["llama-3.1-8b", "--server", "vllm", "--max-num-seqs", "x"], "argument --max-num-seqs: invalid int value: 'x'"),
    (["llama-3.1-8b", "--server", "vllm", "--enforce-eager=1"], "ignored explicit argument '1'"),
]


@pytest.mark.parametrize(("args", "message"), BAD_VALUES)
def test_a_value_the_servers_parser_refuses_exits_2(kvdoctor: Run, args: list[str], message: str) -> None:
    result = kvdoctor("inspect", *args)
    assert result.code == 2, result.out
    line = result.one_line()
    assert line.startswith("kvdoctor: error: ") and message in line


def test_good_values_of_unmodelled_flags_still_pass_as_not_modelled(kvdoctor: Run) -> None:
    result = kvdoctor("inspect", "llama-3.1-8b", "--mem-fraction-static", "0.85", "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["not_modelled_flags"] == ["--mem-fraction-static 0.85"]
    result = kvdoctor("inspect", "llama-3.1-8b", "--server", "vllm", "--max-model-len", "32k", "--json")
    assert result.code == 0, result.err


# --- Exit 2: a model_type no config loader builds, and MODEL that is not a file ---


@pytest.mark.parametrize("server", ["sglang", "vllm"])
def test_a_model_type_no_loader_knows_exits_2_naming_file_field_and_fix(
    kvdoctor: Run, tmp_path: Path, server: str
) -> None:
    path = _config(tmp_path, "llama-3.1-8b", model_type="[/bold]llama")
    result = kvdoctor("inspect", path, "--server", server)
    assert result.code == 2, result.out
    line = result.one_line()
    assert line.startswith(f"kvdoctor: error: {path}: field 'model_type' = '[/bold]llama' is not a model type")
    assert line.endswith("did you mean 'llama'?")


def test_model_that_is_a_fifo_or_a_device_says_what_it_is(kvdoctor: Run, tmp_path: Path) -> None:
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    result = kvdoctor("inspect", str(pipe))  # returns at all: the FIFO is never opened for reading
    assert (result.code, result.one_line()) == (
        2,
        f"kvdoctor: error: {pipe}: is a FIFO, not a config file or model directory",
    )
    result = kvdoctor("inspect", "/dev/zero", "--server", "vllm")
    assert (result.code, result.one_line()) == (
        2,
        "kvdoctor: error: /dev/zero: is a character device, not a config file or model directory",
    )


# --- Exit 2: files and names that break the standard library, not kvdoctor ---


def _hostile_files(tmp_path: Path) -> dict[str, str]:
    base = json.dumps(load_config("llama-3.1-8b").top)
    files = {
        "deep": '{"model_type": "llama", "x": ' + "[" * 200_000 + "]" * 200_000 + "}",
        "deep70": base[:-1] + ', "x": ' + "[" * 70 + "]" * 70 + "}",
        "bigint": base[:-1] + ', "x": 1' + "0" * 5000 + "}",
        "huge": base[:-1] + ', "pad": "' + "x" * (16 * 2**20) + '"}',
    }
    for name, text in files.items():
        (tmp_path / f"{name}.json").write_text(text, encoding="utf-8")
    return {name: str(tmp_path / f"{name}.json") for name in files}


HOSTILE_NAMES = [
    ("deep", "JSON nested deeper than 64 levels"),
    ("deep70", "JSON nested deeper than 64 levels"),
    ("bigint", "unreadable JSON value (Exceeds the limit (4300 digits)"),
    ("huge", "larger than 16 MiB, not a config.json"),
    ("a" * 300, "not a usable path (File name too long)"),
    ("~nouser-kvdoctor/x", "cannot expand the home directory"),
    ("inkling\nsmall\x1b[31m", "inkling small: not a path, bundled fixture or cached Hub id"),
]


@pytest.mark.parametrize(("model", "message"), HOSTILE_NAMES)
def test_hostile_files_and_names_exit_2(kvdoctor: Run, tmp_path: Path, model: str, message: str) -> None:
    model = _hostile_files(tmp_path).get(model, model)
    result = kvdoctor("inspect", model)
    assert result.code == 2
    line = result.one_line()
    assert message in line and "\x1b" not in line


ROUNDTRIP_OPTIONS = [
    (["--seed", str(2**64)], "--seed must be in [0, 2**64)"),
    (["--tokens", str(2**63)], "--tokens must be in [2, 2,147,483,647]"),
    (["--requests", str(2**63)], "the largest --requests that fits is"),
    (["--requests", "100000"], "the largest --requests that fits is"),
    (["--tokens", "100000000"], "not even 2 requests fit: lower --tokens"),
]


@pytest.mark.parametrize(("options", "message"), ROUNDTRIP_OPTIONS)
def test_roundtrip_options_past_what_fits_exit_2_before_allocating(
    kvdoctor: Run, monkeypatch: pytest.MonkeyPatch, options: list[str], message: str
) -> None:
    import kvdoctor.state.run as run_mod

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("pools were allocated for a run that cannot fit")

    monkeypatch.setattr(run_mod, "build_pools", never)
    result = kvdoctor("roundtrip", "inkling-small", "--device", "cpu", *options)
    assert result.code == 2
    line = result.one_line()
    assert message in line


# --- Outside strings are text, never markup ---


def test_markup_and_escapes_in_config_and_path_render_as_text(kvdoctor: Run, tmp_path: Path) -> None:
    folder = tmp_path / "[bold red]odd[/x]"  # "[/x]" closes a tag nothing opened: a MarkupError in rich
    folder.mkdir(parents=True)
    _config(folder, "llama-3.1-8b", architectures=["LlamaForCausalLM", "[/x]\x1b[31mEvil"])
    table = kvdoctor("inspect", str(folder))
    assert table.code == 0, table.err
    assert "[attention only;" in table.out  # the bracketed rule source no longer vanishes as a tag
    trip = kvdoctor(
        "roundtrip", str(folder), "--device", "cpu", "--requests", "2", "--tokens", "8", "--layers", "1", "--heads", "1"
    )
    assert trip.code == 0, trip.err
    assert "[bold red]odd[/x]" in trip.out and "\x1b" not in trip.out


def test_family_rule_source_is_shown_in_the_model_table(kvdoctor: Run) -> None:
    result = kvdoctor("inspect", "inkling-small")
    assert "[mamba2_config; srt/configs/hybrid_arch.py" in result.out


# --- Exit 4: kvdoctor's own bugs are not the user's fault ---


def test_a_bug_in_the_analysis_exits_4_not_2(kvdoctor: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    import kvdoctor.core.sglang.analysis as analysis

    def broken(*args: object, **kwargs: object) -> None:
        raise TypeError("unsupported operand type(s) for //: 'NoneType' and 'int'")

    monkeypatch.setattr(analysis, "size_pools", broken)
    line = kvdoctor("inspect", "inkling-small").one_line()
    assert line == (
        "kvdoctor: internal error: TypeError: unsupported operand type(s) for //: 'NoneType' and 'int' "
        "(a kvdoctor bug; rerun with KVDOCTOR_DEBUG=1 for the traceback)"
    )
    assert kvdoctor("inspect", "inkling-small").code == 4


def test_a_bug_in_rendering_exits_4(kvdoctor: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    import kvdoctor.cli.render.sglang as render_inspect

    def broken(report: object, console: object = None) -> None:
        raise KeyError("model")

    monkeypatch.setattr(render_inspect, "render", broken)
    result = kvdoctor("inspect", "inkling-small")
    assert result.code == 4
    assert result.one_line().startswith("kvdoctor: internal error: KeyError: 'model' (a kvdoctor bug;")


def test_kvdoctor_debug_keeps_the_traceback(kvdoctor: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    import kvdoctor.core.sglang.analysis as analysis

    monkeypatch.setattr(analysis, "size_pools", lambda *a, **k: 1 // 0)
    monkeypatch.setenv("KVDOCTOR_DEBUG", "1")
    monkeypatch.setattr(sys, "argv", ["kvdoctor", "inspect", "inkling-small"])
    with pytest.raises(ZeroDivisionError):
        cli_app.main()


def test_ctrl_c_during_a_command_is_one_line_and_130(kvdoctor: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    import kvdoctor.core.sglang.analysis as analysis

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(analysis, "size_pools", interrupted)
    result = kvdoctor("inspect", "inkling-small")
    assert (result.code, result.one_line()) == (130, "kvdoctor: interrupted")


def test_ctrl_c_while_the_cli_is_still_importing_is_one_line_and_130() -> None:
    code = textwrap.dedent("""
        import runpy, sys
        class CtrlC:
            def find_spec(self, name, path=None, target=None):
                if name == "kvdoctor.cli.inspect_cmd":
                    raise KeyboardInterrupt
        sys.meta_path.insert(0, CtrlC())
        sys.argv = ["kvdoctor", "inspect", "inkling-small"]
        runpy.run_module("kvdoctor", run_name="__main__")
    """)
    env = {k: v for k, v in os.environ.items() if k != "KVDOCTOR_DEBUG"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env, check=False)
    assert out.returncode == 130
    assert out.stderr == "kvdoctor: interrupted\n"
