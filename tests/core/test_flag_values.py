"""Every known flag's value is held to the server's own argparse grammar (issue 16, item 4).

A value SGLang's or vLLM's parser refuses (``--mem-fraction-static abc``, ``--gpu-memory-utilization abc``,
``--max-model-len=abc``, a choice it does not offer, a list flag with no value) used to pass as "not
modelled" and the launch as checked: it is exit 2 with argparse's words. The grammar is data generated
from each server's own parser (``SGLANG_FLAG_VALUES``, ``VLLM_FLAG_VALUES``).
"""

from __future__ import annotations

import pytest

from kvdoctor._exceptions import FlagError
from kvdoctor.core.flag_values import CUSTOM, ValueCheck
from kvdoctor.core.sglang._generated.server_flags import (
    SGLANG_FLAG_VALUES,
    SGLANG_MULTI_VALUE,
    SGLANG_OPTIONAL_VALUE,
    SGLANG_SERVER_FLAGS,
    SGLANG_SWITCHES,
)
from kvdoctor.core.sglang.flags import parse_flags, parse_launch_line
from kvdoctor.core.vllm._generated import server_flags as vllm_tables
from kvdoctor.core.vllm.flags import parse_vllm_flags, parse_vllm_launch_line

# --- SGLang: flags kvdoctor does not model are still type-checked ---


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--mem-fraction-static", "abc"], "argument --mem-fraction-static: invalid float value: 'abc'"),
        (["--mem-fraction-static=abc"], "argument --mem-fraction-static: invalid float value: 'abc'"),
        (["--chunked-prefill-size", "1.5"], "argument --chunked-prefill-size: invalid int value: '1.5'"),
        (["--schedule-policy", "fastest"], "argument --schedule-policy: invalid choice: 'fastest' (choose from 'lpm'"),
        (["--dtype", "float8"], "argument --dtype: invalid choice: 'float8'"),  # modelled, yet SGLang's choices hold
        (["--radix-eviction-policy-config", "{not json"], "argument --radix-eviction-policy-config: invalid loads"),
        (["--cuda-graph-bs-decode"], "argument --cuda-graph-bs-decode: expected at least one argument"),
        (["--cuda-graph-bs-decode", "1", "two"], "argument --cuda-graph-bs-decode: invalid int value: 'two'"),
        (["--context-bucket", "1.5Ki"], "argument --context-bucket: Decimals are not allowed with IEC suffixes"),
        (["--mem-fraction-static"], "argument --mem-fraction-static: expected one argument"),  # nothing at the end
        (["--trust-remote-code=yes"], "ignored explicit argument 'yes'"),
    ],
)
def test_a_value_sglangs_parser_refuses_is_exit_2_with_argparses_words(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError) as refused:
        parse_flags(argv)
    assert message in str(refused.value)
    assert refused.value.exit_code == 2


def test_the_launch_line_reader_checks_values_too() -> None:
    with pytest.raises(FlagError, match="invalid float value: 'abc'"):
        parse_launch_line(["python", "-m", "sglang.launch_server", "--model-path", "x", "--mem-fraction-static", "abc"])


@pytest.mark.parametrize(
    "argv",
    [
        ["--mem-fraction-static", "0.8"],
        ["--mem-fraction-static=0.8"],
        ["--chunked-prefill-size", "-1"],
        ["--schedule-policy", "fcfs"],
        ["--context-bucket", "64k"],
        ["--cuda-graph-bs-decode", "1", "2", "4"],
        ["--radix-eviction-policy-config", '{"a": 1}'],
        ["--cuda-graph-config", "anything"],  # a converter kvdoctor does not restate: unchecked, still listed
    ],
)
def test_a_value_sglang_accepts_is_listed_as_not_modelled(argv: list[str]) -> None:
    flags = parse_flags(argv)
    assert flags.not_modelled and flags.not_modelled[0].startswith(argv[0].partition("=")[0])


def test_modelled_flags_keep_kvdoctors_own_message() -> None:
    with pytest.raises(FlagError, match="argument --page-size: invalid positive integer value: 'abc'"):
        parse_flags(["--page-size", "abc"])


def test_tp_size_abc_is_refused_on_both_servers() -> None:
    with pytest.raises(FlagError, match="--tp-size"):
        parse_flags(["--tp-size", "abc"])
    with pytest.raises(FlagError, match="argument --tensor-parallel-size: invalid int value: 'abc'"):
        parse_vllm_flags(["--tensor-parallel-size", "abc"])


# --- vLLM ---


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gpu-memory-utilization", "abc"], "argument --gpu-memory-utilization: invalid float value: 'abc'"),
        (["--max-model-len=abc"], "argument --max-model-len: invalid human_readable_int_or_auto value: 'abc'"),
        (["--max_model_len", "1.5K"], "argument --max-model-len: Decimals are not allowed with binary suffixes"),
        (["--max-num-seqs", "many"], "argument --max-num-seqs: invalid int value: 'many'"),
        (["--block-size=x"], "argument --block-size: invalid int value: 'x'"),
        (["--api-key"], "argument --api-key: expected at least one argument"),
        (["--seed", "1.5"], "argument --seed: invalid int value: '1.5'"),
        (["--grpc-port", "port"], "argument --grpc-port: invalid int value: 'port'"),
        (["--enable-prefix-caching=yes"], "ignored explicit argument 'yes'"),
    ],
)
def test_a_value_vllms_parser_refuses_is_exit_2(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError) as refused:
        parse_vllm_flags(argv)
    assert message in str(refused.value)


@pytest.mark.parametrize(
    "argv",
    [
        ["--max-model-len", "4k"],
        ["--max-model-len", "auto"],
        ["--max-model-len=-1"],
        ["--grpc-port", "None"],  # optional_type(int): "None" means unset
        ["--grpc-port", "50051"],
    ],
)
def test_a_value_vllm_accepts_passes(argv: list[str]) -> None:
    flags = parse_vllm_flags(argv)
    assert flags.not_modelled or flags.max_model_len is not None  # --max-model-len is modelled (core/vllm/model_len.py)


def test_vllm_launch_line_checks_values() -> None:
    with pytest.raises(FlagError, match="--gpu-memory-utilization: invalid float value"):
        parse_vllm_launch_line(["vllm", "serve", "m", "--gpu-memory-utilization", "abc"])


@pytest.mark.parametrize(
    ("flag", "field", "value"),
    [
        ("--enable-prefix-caching", "enable_prefix_caching", True),
        ("--disable-prefix-caching", "enable_prefix_caching", False),  # EnableDisableAction's inverse
        ("--no-enable-prefix-caching", "enable_prefix_caching", False),  # the hidden --no- spelling
        ("--disable-hybrid-kv-cache-manager", "disable_hybrid_kv_cache_manager", True),
        ("--enable-hybrid-kv-cache-manager", "disable_hybrid_kv_cache_manager", False),
        ("--no-disable-hybrid-kv-cache-manager", "disable_hybrid_kv_cache_manager", False),
    ],
)
def test_every_spelling_vllms_parser_registers_for_a_modelled_switch(flag: str, field: str, value: bool) -> None:
    """vLLM 0.33 pairs --enable-x with --disable-x (EnableDisableAction); the generated table lists both."""
    assert flag in vllm_tables.VLLM_SERVER_FLAGS
    flags = parse_vllm_flags([flag])
    assert getattr(flags, field) is value and not flags.not_modelled


# --- the generated tables are one description of one parser ---


@pytest.mark.parametrize(
    ("names", "switches", "many", "optional", "values"),
    [
        (SGLANG_SERVER_FLAGS, SGLANG_SWITCHES, SGLANG_MULTI_VALUE, SGLANG_OPTIONAL_VALUE, SGLANG_FLAG_VALUES),
        (
            vllm_tables.VLLM_SERVER_FLAGS,
            vllm_tables.VLLM_SWITCHES,
            vllm_tables.VLLM_MULTI_VALUE,
            vllm_tables.VLLM_OPTIONAL_VALUE,
            vllm_tables.VLLM_FLAG_VALUES,
        ),
    ],
    ids=["sglang", "vllm"],
)
def test_every_known_flag_has_a_value_grammar_matching_its_arity(
    names: frozenset[str], switches: frozenset[str], many: frozenset[str], optional: frozenset[str], values: dict
) -> None:
    assert set(values) == names
    assert {n for n, (_, nargs, _c) in values.items() if nargs == 0} == switches
    assert {n for n, (_, nargs, _c) in values.items() if nargs in ("+", "*")} == many
    assert {n for n, (_, nargs, _c) in values.items() if nargs == "?"} == optional


def test_a_converter_kvdoctor_does_not_restate_is_skipped_not_guessed() -> None:
    check = ValueCheck("server flags")
    check.check("--x", ["whatever"], (f"{CUSTOM}parse_cuda_graph_config_arg", None, None))  # no error: skipped
    with pytest.raises(FlagError, match="invalid int value: 'x'"):
        check.check("--y", ["x"], ("int", None, None))
    with pytest.raises(FlagError, match="invalid choice: '3'"):
        check.check("--z", ["3"], ("int", None, (0, 2, 4)))  # choices compared after conversion, as argparse does
    check.check("--z", ["2"], ("int", None, (0, 2, 4)))


def test_context_length_takes_sglangs_human_readable_counts() -> None:
    """SGLang reads --context-length with human_readable_int (its generated grammar says so): 64k is 64,000."""
    assert SGLANG_FLAG_VALUES["--context-length"][0] == "sglang_human_int"
    assert parse_flags(["--context-length", "64k"]).context_length == 64_000
    with pytest.raises(FlagError, match="--context-length"):
        parse_flags(["--context-length", "lots"])
