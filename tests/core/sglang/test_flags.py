from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from kvdoctor._exceptions import FlagError
from kvdoctor.core.launch_line import scan
from kvdoctor.core.sglang._generated.server_flags import SGLANG_SERVER_FLAGS
from kvdoctor.core.sglang.analysis import analyze
from kvdoctor.core.sglang.flags import SGLANG, parse_flags, parse_launch_line


def test_sglang_spellings_are_modelled_and_others_kept() -> None:
    flags = parse_flags(
        [
            "--kv-cache-dtype",
            "mxfp8",
            "--disaggregation-mode",
            "decode",
            "--tp",
            "2",
            "--quantization",
            "modelopt_fp4",
            "--trust-remote-code",
            "--max-total-tokens",
            "65536",
            "--enable-hicache",
        ]
    )
    assert (flags.kv_cache_dtype, flags.disaggregation_mode, flags.tp_size) == ("mxfp8", "decode", 2)
    assert flags.max_total_tokens == 65536
    assert flags.enable_hierarchical_cache
    assert flags.not_modelled == ("--quantization modelopt_fp4", "--trust-remote-code")


def test_unset_ratios_stay_unset_so_model_overrides_can_apply() -> None:
    flags = parse_flags([])
    assert flags.swa_full_tokens_ratio is None and flags.mamba_full_memory_ratio is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--swa-full-tokens-ratio", "1.5"], r"must be in \(0, 1\]"),
        (["--mamba-full-memory-ratio", "0"], "must be a finite number > 0"),
        (["--hicache-ratio", "inf"], "must be a finite number > 0"),
        (["--max-total-tokens", "-5"], "must be a positive integer"),
        (["--max-total-tokens", "1.5Ki"], "decimals are not allowed"),
        (["--page-size", "0"], "must be a positive integer"),
        (["--hicache-size", "-1"], "must not be negative"),
        (["--kv-cache-dtype", "int8_g64"], "invalid choice"),
        (["--tp", "2", "--tp-size", "4"], "given twice"),
        (["--hicache-storage-backend", "floppy"], "invalid choice"),
    ],
)
def test_malformed_flags_raise_flag_errors(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError, match=message):
        parse_flags(argv)


HOST_POOL = ["--disaggregation-decode-retraction-backup", "host_pool"]


@pytest.mark.parametrize(
    ("argv", "key", "message", "where"),
    [
        (
            ["--disaggregation-mode", "prefill", *HOST_POOL],
            "host_pool_not_decode",
            "only supported on a PD decode server",
            "kv_cache_hook.py:353-360",
        ),
        (
            ["--disaggregation-mode", "decode", *HOST_POOL, "--dcp-size", "2"],
            "host_pool_dcp",
            "does not support --dcp-size > 1",
            "kv_cache_hook.py:360-364",
        ),
        (
            ["--disaggregation-mode", "decode", *HOST_POOL, "--enable-priority-scheduling"],
            "host_pool_priority",
            "requires --disable-priority-preemption",
            "kv_cache_hook.py:365-373",
        ),
        (
            ["--disaggregation-decode-enable-offload-kvcache"],
            "offload_not_decode",
            "only supported for decode side",
            "kv_cache_hook.py:399-403",
        ),
        (
            [
                "--disaggregation-mode",
                "decode",
                "--disaggregation-decode-host-receive-threshold",
                "0.5",
                "--disaggregation-decode-retraction-backup",
                "cpu_tensor",
            ],
            "receive_cpu_tensor",
            "requires host_pool retraction",
            "pd_disaggregation_hook.py:75-76",
        ),
        (
            ["--disaggregation-decode-host-receive-threshold", "0.5"],
            "host_pool_not_decode",
            "only supported on a PD decode server",
            "kv_cache_hook.py:353-360",
        ),
        (
            ["--enable-hierarchical-cache", "--disable-radix-cache"],
            "hicache_without_radix",
            "mutually exclusive",
            "kv_cache_hook.py:393-397",
        ),
    ],
)
def test_flag_combinations_sglang_refuses_are_kvd014_not_input_errors(
    argv: list[str], key: str, message: str, where: str
) -> None:
    a = analyze("llama-3.1-8b", argv)  # parses: these are well-formed launches SGLang refuses at start-up
    assert key in {r.key for r in a.refusals}
    hazard = next(h for h in a.hazards if h.code == "KVD014-SGLANG-REFUSES" and message in h.message)
    assert hazard.severity == "error" and hazard.where.endswith(where) and a.spec.components


def test_what_sglang_accepts_is_accepted() -> None:
    assert parse_flags(["--max-total-tokens", "64k"]).max_total_tokens == 64_000
    assert parse_flags(["--max-total-tokens", "64Ki"]).max_total_tokens == 65_536
    assert parse_flags(["--mamba-full-memory-ratio", "1.5"]).mamba_full_memory_ratio == 1.5
    # cpu_tensor on a prefill server is not refused (it simply never applies).
    assert parse_flags(["--disaggregation-decode-retraction-backup", "cpu_tensor"]).disaggregation_mode == "null"
    allowed = [
        "--disaggregation-mode",
        "decode",
        "--disaggregation-decode-retraction-backup",
        "host_pool",
        "--enable-priority-scheduling",
        "--disable-priority-preemption",
    ]
    assert parse_flags(allowed).enable_priority_scheduling


# --- SGLang's own flag list: typos refused, real flags kept, launch lines pasted whole ---

ROOT = Path(__file__).resolve().parents[3]
SGLANG_SOURCES = [ROOT / ".venv-sglang/lib/python3.11/site-packages/sglang"]


def test_every_flag_kvdoctor_models_is_one_sglang_accepts() -> None:
    from kvdoctor.core.sglang.flags import _modelled_options, _parser

    assert _modelled_options(_parser()) - SGLANG_SERVER_FLAGS == {"--tp"}  # --tp: argparse abbreviation
    assert SGLANG.resolve("--tp") == "--tp-size"


def test_the_generated_flag_list_is_what_the_script_reads_from_the_wheel() -> None:
    """The option strings (read from the source) and each one's value grammar (read from SGLang's own parser,
    so the script runs in SGLang's venv) regenerate to exactly the committed table."""
    source = next((p for p in SGLANG_SOURCES if (p / "srt" / "server_args.py").is_file()), None)
    python = ROOT / ".venv-sglang" / "bin" / "python"
    if source is None or not python.is_file():
        pytest.skip("SGLang 0.5.23 is not installed in .venv-sglang (make sglang-env)")
    script = ROOT / "scripts" / "sglang-server-flags.py"
    out = subprocess.run([str(python), str(script), str(source)], capture_output=True, text=True, timeout=300)
    if out.returncode and "ModuleNotFoundError" in out.stderr:
        pytest.skip(f"SGLang does not import here: {out.stderr.strip().splitlines()[-1:]}")
    assert out.returncode == 0, out.stderr
    assert out.stdout == (ROOT / "kvdoctor" / "core" / "sglang" / "_generated" / "server_flags.py").read_text(
        encoding="utf-8"
    )


LIVE_PARSER = """
import argparse, json
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
print(json.dumps([[a.option_strings, a.nargs] for a in parser._actions if "--help" not in a.option_strings]))
"""


def test_the_generated_flag_list_matches_sglangs_live_parser() -> None:
    python = ROOT / ".venv-sglang" / "bin" / "python"
    if not python.is_file():
        pytest.skip("SGLang 0.5.23 is not installed in .venv-sglang")
    out = subprocess.run(
        [str(python), "-c", LIVE_PARSER], capture_output=True, text=True, timeout=300, check=False, cwd="/"
    )
    if out.returncode:
        pytest.skip(f"SGLang does not import here: {out.stderr.strip().splitlines()[-1:]}")
    actions = json.loads(out.stdout.strip().splitlines()[-1])

    def names(keep: Callable[[object], bool]) -> set[str]:
        return {n for strings, nargs in actions if keep(nargs) for n in strings}

    from kvdoctor.core.sglang._generated import server_flags as generated

    assert names(lambda n: True) == generated.SGLANG_SERVER_FLAGS
    assert names(lambda n: n == 0) == generated.SGLANG_SWITCHES
    assert names(lambda n: n in ("+", "*")) == generated.SGLANG_MULTI_VALUE
    assert names(lambda n: n == "?") == generated.SGLANG_OPTIONAL_VALUE


@pytest.mark.parametrize(
    ("word", "suggestion"),
    [
        ("--strcit", "--strict"),
        ("--jsn", "--json"),
        ("--kv-cache-dtpye", "--kv-cache-dtype"),
        ("--page-szie", "--page-size"),
    ],
)
def test_an_option_neither_kvdoctor_nor_sglang_knows_is_refused_with_a_suggestion(word: str, suggestion: str) -> None:
    with pytest.raises(FlagError, match=f"unknown option {word}: .*did you mean {suggestion}\\?"):
        parse_flags([word, "1"], own_options=("--strict", "--json"))


def test_unique_prefixes_expand_and_ambiguous_ones_are_refused_as_sglang_does() -> None:
    flags = parse_flags(["--kv-cache", "mxfp8", "--trust-remote", "--page-size=16"])
    assert (flags.kv_cache_dtype, flags.page_size, flags.not_modelled) == ("mxfp8", 16, ("--trust-remote-code",))
    with pytest.raises(FlagError, match="ambiguous option: --cuda-graph-bs could match"):
        parse_flags(["--cuda-graph-bs", "8"])


def test_values_are_read_with_sglang_arities() -> None:
    found = scan(
        [
            "--cuda-graph-bs-decode",
            "1",
            "2",
            "4",
            "--trust-remote-code",
            "--context-length",
            "-1",
            "--model-checksum",
            "--tp-size",
            "2",
        ],
        SGLANG,
    )
    assert [(o.name, o.values) for o in found.options] == [
        ("--cuda-graph-bs-decode", ("1", "2", "4")),
        ("--trust-remote-code", ()),
        ("--context-length", ("-1",)),
        ("--model-checksum", ()),
        ("--tp-size", ("2",)),
    ]
    with pytest.raises(FlagError, match="argument --quantization: expected one argument"):
        scan(["--quantization", "--tp-size", "2"], SGLANG)
    with pytest.raises(FlagError, match="ignored explicit argument"):
        scan(["--trust-remote-code=1"], SGLANG)


def test_a_stray_word_among_server_flags_is_refused() -> None:
    with pytest.raises(FlagError, match="unexpected argument 'fp8'"):
        parse_flags(["--trust-remote-code", "fp8"])


@pytest.mark.parametrize(
    "words",
    [
        ["M", "--tp", "2"],
        ["--tp", "2", "M"],
        ["--model-path", "M", "--tp", "2"],
        ["--tp", "2", "--model=M"],
        ["python", "-m", "sglang.launch_server", "--model-path", "M", "--tp", "2"],
        ["M", "HF_HOME=/x", "python3.11", "-m", "sglang.launch_server", "--model", "M", "--tp-size", "2"],
        ["/opt/venv/bin/sglang", "serve", "M", "--tensor-parallel-size", "2"],
    ],
)
def test_model_and_flags_from_any_launch_line(words: list[str]) -> None:
    line = parse_launch_line(words)
    assert (line.model, line.server_argv) in {("M", ("--tp-size", "2")), ("M", ("--tensor-parallel-size", "2"))}
    assert parse_flags(list(line.server_argv)).tp_size == 2


def test_launch_lines_without_a_model_or_with_two_are_refused() -> None:
    with pytest.raises(FlagError, match="missing MODEL"):
        parse_launch_line(["--tp", "2"])
    assert parse_launch_line(["--tp", "2"], default_model="D").model == "D"
    with pytest.raises(FlagError, match="name different models"):
        parse_launch_line(["A", "--model-path", "B"])
    with pytest.raises(FlagError, match="unexpected argument 'B' after MODEL 'A'"):
        parse_launch_line(["A", "B"])


def test_own_options_after_the_separator_are_refused_unless_sglang_spells_them_too() -> None:
    with pytest.raises(FlagError, match="--json is kvdoctor's own option"):
        parse_launch_line(["M", "--json"], own_options=("--json",))
    assert parse_launch_line(["M", "--device", "cuda"], own_options=("--device",)).server_argv == ("--device", "cuda")
