"""`roundtrip --server vllm --engine vllm` refusals that need no vLLM: which engine runs which server's round
trip, and only the options and faults it acts on. Each is one exit-2 line before anything is imported (the
vLLM runs themselves: tests/engines/vllm/test_vllm_roundtrip_cli.py, in .venv-vllm)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

LLAMA_VLLM = ["roundtrip", "llama-3.1-8b", "--server", "vllm", "--engine", "vllm"]
VLLM_OPTIONS = "(its options: --tokens, --seed, --layers, --inject, --device cpu, --json, --junit)"


def kvdoctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvdoctor", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (  # kvdoctor's own model is of SGLang's pools: it must not answer a vLLM round trip
            ["roundtrip", "llama-3.1-8b", "--server", "vllm"],
            "roundtrip --server vllm runs vLLM's own offloading worker: add --engine vllm "
            "(kvdoctor's own model is of SGLang's pools)",
        ),
        (
            ["roundtrip", "llama-3.1-8b", "--server", "vllm", "--engine", "sglang"],
            "--engine sglang cannot answer for --server vllm (use --engine vllm)",
        ),
        (
            ["roundtrip", "inkling-small", "--engine", "vllm"],
            "--engine vllm answers for --server vllm (add --server vllm)",
        ),
        (
            [*LLAMA_VLLM, "--inject", "missing-mamba"],
            "--inject missing-mamba is a fault of SGLang's pools; --engine vllm injects drop-group, reorder-blocks, "
            "skip-scales, null-source, swa-short-store, mis-stride",
        ),
        (
            ["roundtrip", "inkling-small", "--inject", "drop-group"],
            "--inject drop-group is a fault of vLLM's offloading worker (--server vllm --engine vllm); this engine "
            "injects missing-mamba, double-mamba, drop-block-scale, drop-swa, host-pool-on-ssm, restore-order, "
            "clobber-padding",
        ),
        (
            [*LLAMA_VLLM, "--requests", "4"],
            "--requests is an option of SGLang's round trip; --engine vllm moves one request's blocks of every group "
            + VLLM_OPTIONS,
        ),
        (
            [*LLAMA_VLLM, "--heads", "1"],
            "--heads is an option of SGLang's round trip; --engine vllm moves one request's blocks of every group "
            + VLLM_OPTIONS,
        ),
        (
            [*LLAMA_VLLM, "--gpu-arch", "sm100"],  # even at its default value: given, it would be ignored
            "--gpu-arch is an option of SGLang's round trip; --engine vllm moves one request's blocks of every group "
            + VLLM_OPTIONS,
        ),
        (
            [*LLAMA_VLLM, "--emulate-d2h"],
            "--emulate-d2h is an option of SGLang's round trip; --engine vllm moves one request's blocks of every "
            "group " + VLLM_OPTIONS,
        ),
        (
            [*LLAMA_VLLM, "--device", "cuda"],
            "--engine vllm runs vLLM's offloading worker on the CPU (the shims it names): use --device cpu",
        ),
        (  # vLLM's flag table, not SGLang's: an SGLang flag is unknown to vLLM
            [*LLAMA_VLLM, "--page-size", "16"],
            "unknown option --page-size: neither kvdoctor's nor a vLLM 0.33.0 server flag; did you mean --ubatch-size?",
        ),
    ],
)
def test_a_round_trip_vllm_cannot_answer_is_one_line_exit_2(args: list[str], line: str) -> None:
    out = kvdoctor(*args)
    assert (out.returncode, out.stdout) == (2, ""), out.stderr
    assert out.stderr.strip() == f"kvdoctor: error: {line}"


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed in this environment")
def test_without_vllm_the_vllm_round_trip_names_the_install_command() -> None:
    out = kvdoctor(*LLAMA_VLLM, "--json")
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr.strip() == (
        "kvdoctor: error: --engine vllm: vLLM is not installed here; install it with: make vllm-env "
        "(then run .venv-vllm/bin/kvdoctor)"
    )


def test_the_inject_choices_are_every_engines_faults_and_the_engine_lists_agree() -> None:
    """The --inject enum is SGLang's faults then vLLM's; each engine's own list is the one it acts on."""
    from kvdoctor.core.faults import roundtrip_names
    from kvdoctor.roundtrip.faults import InjectName
    from kvdoctor.state.faults import FAULTS

    sglang, vllm = roundtrip_names("sglang"), roundtrip_names("vllm")
    assert [f.value for f in InjectName] == [*sglang, *vllm]
    assert list(sglang) == list(FAULTS)
    assert vllm == ("drop-group", "reorder-blocks", "skip-scales", "null-source", "swa-short-store", "mis-stride")
