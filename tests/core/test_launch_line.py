"""The launch-line scanner both servers share (``core/launch_line.py``): one reader, the vocabulary the caller's."""

from __future__ import annotations

import inspect

import pytest

from kvdoctor._exceptions import FlagError
from kvdoctor.core import launch_line
from kvdoctor.core.launch_line import scan, split_launcher
from kvdoctor.core.sglang import flags as sglang_flags
from kvdoctor.core.sglang.flags import SGLANG
from kvdoctor.core.vllm import flags as vllm_flags
from kvdoctor.core.vllm.flags import VLLM


def test_the_scanner_has_no_default_server() -> None:
    # The shared module must not read a line as SGLang's unless its caller says so.
    assert inspect.signature(scan).parameters["vocabulary"].default is inspect.Parameter.empty
    with pytest.raises(TypeError):
        scan(["--tp", "2"])  # type: ignore[call-arg]


def test_one_word_reads_per_the_vocabulary_it_is_given() -> None:
    # Both expand a unique prefix (argparse's allow_abbrev, on in both parsers:
    # tests/engines/vllm/test_vllm_owned_flags.py);
    # vLLM reads underscores as dashes first, SGLang does not; a prefix of two flags is ambiguous to both.
    assert scan(["--tp", "2"], SGLANG).options[0].name == "--tp-size"
    assert scan(["--tensor-parallel", "2"], VLLM).options[0].name == "--tensor-parallel-size"
    assert scan(["--max_model_l", "8"], VLLM).options[0].name == "--max-model-len"
    with pytest.raises(FlagError, match=r"ambiguous option: --max-num-s could match --max-num-scheduled-tokens"):
        scan(["--max-num-s", "2"], VLLM)
    assert scan(["--max_model_len", "8"], VLLM).options[0].name == "--max-model-len"
    with pytest.raises(FlagError, match=r"neither kvdoctor's nor an SGLang .* server flag"):
        scan(["--max_total_tokens", "8"], SGLANG)


@pytest.mark.parametrize(
    ("tokens", "launchers", "expected"),
    [
        (
            ["HF_HOME=/x", "python3.11", "-m", "sglang.launch_server", "--tp", "2"],
            sglang_flags.LAUNCHERS,
            ([], ["--tp", "2"], "python3.11 -m sglang.launch_server"),
        ),
        (
            ("M", "CUDA_VISIBLE_DEVICES=0", "/usr/bin/sglang", "serve", "--tp", "2"),  # a tuple reads the same
            sglang_flags.LAUNCHERS,
            (["M"], ["--tp", "2"], "/usr/bin/sglang serve"),
        ),
        (
            ("X=1", "vllm", "serve", "m", "--port=9"),
            vllm_flags.LAUNCHERS,
            ([], ["m", "--port=9"], "vllm serve"),
        ),
        (
            ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"],
            vllm_flags.LAUNCHERS,
            ([], ["--model", "m"], "python -m vllm.entrypoints.openai.api_server"),
        ),
        (["vllm", "serve", "m"], sglang_flags.LAUNCHERS, ([], ["vllm", "serve", "m"], None)),  # not SGLang's
    ],
)
def test_one_launcher_split_serves_both_servers(
    tokens: list[str], launchers: tuple[tuple[str, ...], ...], expected: tuple[list[str], list[str], str | None]
) -> None:
    assert split_launcher(tokens, launchers) == expected


def test_the_rooms_keep_no_scanner_of_their_own() -> None:
    # One _split_launcher, one scan: the rooms hold only their vocabulary and their launchers.
    for room in (sglang_flags, vllm_flags):
        for name in ("_split_launcher", "_launcher_at", "_PYTHON", "_ENV_ASSIGNMENT", "_NUMBER", "_suggest"):
            assert not hasattr(room, name), f"{room.__name__}.{name}"
        assert room.scan is launch_line.scan
