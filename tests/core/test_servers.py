"""The server seam's facts (``kvdoctor.core.servers``) held to what each room's own modules say."""

from __future__ import annotations

import pytest

from kvdoctor.core import servers
from kvdoctor.core.servers import Server, ServerFacts


def test_each_server_has_facts_that_agree_with_its_rules_and_flag_table() -> None:
    from kvdoctor.core.sglang._generated.server_flags import SGLANG_VERSION
    from kvdoctor.core.sglang.rules.citations import RULES_REVISION as SGLANG_REVISION
    from kvdoctor.core.vllm._generated.server_flags import VLLM_VERSION
    from kvdoctor.core.vllm.rules import RULES_REVISION as VLLM_REVISION

    sglang, vllm = servers.facts(Server.SGLANG), servers.facts("vllm")
    assert (sglang.rules_version, sglang.rules_revision) == (SGLANG_VERSION, SGLANG_REVISION)
    assert (vllm.rules_version, vllm.rules_revision) == (VLLM_VERSION, VLLM_REVISION)
    assert (sglang.noun, vllm.noun) == ("retraction", "preemption")
    assert servers.servers() == ("sglang", "vllm")
    for s in Server:
        assert servers.rule_model(s).vocabulary() is not None


def test_an_unknown_server_is_named_with_the_known_ones() -> None:
    with pytest.raises(KeyError, match="known: sglang, vllm"):
        servers.facts("tensorrt-llm")


@pytest.mark.parametrize(
    ("server", "words", "model", "argv"),
    [
        ("sglang", ["m", "--kv-cache-dtype", "fp8_e4m3", "--tp", "2"], "m", ("--kv-cache-dtype", "fp8_e4m3")),
        ("vllm", ["vllm", "serve", "m", "--max_model_len", "8192"], "m", ("--max-model-len", "8192")),
    ],
)
def test_a_rule_model_reads_its_launch_line_with_its_own_flag_table(
    server: str, words: list[str], model: str, argv: tuple[str, ...]
) -> None:
    line = servers.rule_model(server).launch_line(words, ("--json",))
    assert line.model == model and line.server_argv[: len(argv)] == argv


def test_only_a_rule_model_that_takes_a_platform_says_so() -> None:
    """``drift`` refuses --gpu-arch for a server whose facts say its rules take none (vLLM's)."""
    import inspect

    from kvdoctor.core.sglang.analysis import analyze
    from kvdoctor.core.vllm.analysis import analyze_vllm

    assert servers.facts(Server.SGLANG).platform is ("platform" in inspect.signature(analyze).parameters)
    assert servers.facts(Server.VLLM).platform is ("platform" in inspect.signature(analyze_vllm).parameters)


def test_a_registered_server_is_listed_last_and_taken_back() -> None:
    toy = ServerFacts(
        server="toyserve",  # type: ignore[arg-type]
        title="ToyServe",
        rules_version="1.0",
        rules_revision="toyserve==1.0",
        noun="eviction",
        distributions=("toyserve",),
        rule_model="kvdoctor.core.sglang.server:RULES",
    )
    servers.register(toy)
    try:
        assert servers.servers() == ("sglang", "vllm", "toyserve") and servers.facts("toyserve") is toy
    finally:
        servers.unregister("toyserve")
    assert servers.servers() == ("sglang", "vllm")
    with pytest.raises(KeyError):
        servers.facts("toyserve")
