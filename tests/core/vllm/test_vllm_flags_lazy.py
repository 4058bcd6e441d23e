"""vLLM's flag vocabulary made from the generated table on first use (issue 29: ``inspect --server vllm`` start-up).

A launch line without an option reads no flag table; one with an option reads the same vocabulary, spellings and
modelled flags as when they were built at import. The rule model's vLLM version is restated in ``rules`` (so
loading the rules loads no table): held here to the table's.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from kvdoctor.core.launch_line import scan
from kvdoctor.core.vllm import flags, rules
from kvdoctor.core.vllm._generated import server_flags as table


def test_the_rules_version_is_the_generated_tables() -> None:
    assert rules.VLLM_VERSION == table.VLLM_VERSION
    assert f"vllm=={table.VLLM_VERSION}" == rules.RULES_REVISION


def test_the_lazy_names_are_the_tables_vocabulary() -> None:
    vocabulary = flags.VLLM
    assert flags.VLLM is vocabulary  # made once
    assert vocabulary.known == table.VLLM_SERVER_FLAGS and vocabulary.switches == table.VLLM_SWITCHES
    assert vocabulary.multi_value == table.VLLM_MULTI_VALUE
    assert vocabulary.optional_value == table.VLLM_OPTIONAL_VALUE
    assert vocabulary.values is table.VLLM_FLAG_VALUES
    assert vocabulary.flag_kind == f"a vLLM {table.VLLM_VERSION} server flag"
    assert vocabulary.modelled == flags.MODELLED
    spellings = flags.BOOLEAN_SPELLINGS
    assert set(spellings) <= table.VLLM_SERVER_FLAGS  # only the spellings vLLM's parser registers
    assert spellings["--enable-prefix-caching"] == ("enable_prefix_caching", True)
    assert (
        spellings["--no-enable-prefix-caching"]
        == spellings["--disable-prefix-caching"]
        == (
            "enable_prefix_caching",
            False,
        )
    )
    assert spellings["--disable-hybrid-kv-cache-manager"] == ("disable_hybrid_kv_cache_manager", True)
    assert spellings["--enable-hybrid-kv-cache-manager"] == ("disable_hybrid_kv_cache_manager", False)
    assert set(spellings) <= flags.MODELLED and {"--max-model-len", "-tp", "--kv-transfer-config"} <= flags.MODELLED
    with pytest.raises(AttributeError, match="no attribute 'VLLM_NOPE'"):
        flags.VLLM_NOPE  # noqa: B018


@pytest.mark.parametrize("words", [[], ["llama-3.1-8b"], ["vllm", "serve", "llama-3.1-8b"], ["-1", "x"]])
def test_words_without_an_option_scan_as_the_vocabulary_scans_them(words: list[str]) -> None:
    assert flags._scan(words, ()) == scan(words, flags.VLLM)


def test_a_line_without_an_option_reads_no_flag_table_and_one_with_an_option_does() -> None:
    code = (
        "import sys\n"
        "from kvdoctor.core.vllm import flags\n"
        "line = flags.parse_vllm_launch_line(['vllm', 'serve', 'llama-3.1-8b'])\n"
        "plain = flags.parse_vllm_flags(line.server_argv)\n"
        "print(line.model, plain == flags.VllmFlags(), 'kvdoctor.core.vllm._generated.server_flags' in sys.modules)\n"
        "flagged = flags.parse_vllm_flags(['--no-enable-prefix-caching', '--max_model_len', '1k'])\n"
        "print(flagged.enable_prefix_caching, flagged.max_model_len)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.splitlines() == ["llama-3.1-8b True False", "False 1000"], out.stderr
