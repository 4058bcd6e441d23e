"""--shrink keeps every layer kind and the pattern; the workload is seeded and never holds special ids."""

from __future__ import annotations

import json

import pytest

from kvdoctor.consistency import shrink as shrink_module
from kvdoctor.consistency.shrink import VOCAB, kept_layers, shrink
from kvdoctor.consistency.workload import FIRST_ID, Workload, prompts
from kvdoctor.core import consistency_facts
from kvdoctor.core.config import resolve_config_path
from kvdoctor.core.vllm.consistency_facts import MAMBA_STATE as VLLM_MAMBA_STATE


def fixture(name: str) -> dict[str, object]:
    return json.loads(resolve_config_path(name).read_text())


def test_lfm2_keeps_conv_and_attention_in_model_order() -> None:
    small = shrink(fixture("lfm2-1.2b"))
    assert small["layer_types"] == ["conv", "conv", "full_attention", "conv"]
    assert small["num_hidden_layers"] == 4
    assert (small["hidden_size"], small["vocab_size"], small["torch_dtype"]) == (128, VOCAB, "float32")
    assert small["tie_word_embeddings"] is False  # a tied random head copies its input: degenerate output


def test_dense_models_get_two_layers_and_small_heads() -> None:
    small = shrink(fixture("llama-3.1-8b"))
    assert small["num_hidden_layers"] == 2
    assert (small["num_attention_heads"], small["num_key_value_heads"], small["head_dim"]) == (4, 2, 32)
    assert (small["pad_token_id"], small["bos_token_id"], small["eos_token_id"]) == (0, 1, 2)


def test_a_kind_that_appears_late_is_kept() -> None:
    assert kept_layers(["mamba"] * 7 + ["attention"]) == [0, 7]
    config = {"num_hidden_layers": 8, "hybrid_override_pattern": "MMMMMMM*", "layer_types": None}
    assert shrink(config)["hybrid_override_pattern"] == "M*"


def test_full_attn_idxs_follow_the_kept_layers() -> None:
    config = {"num_hidden_layers": 6, "full_attn_idxs": [2, 5], "vocab_size": 65536}
    small = shrink(config)
    assert small["num_hidden_layers"] == 4 and small["full_attn_idxs"] == [2]


def test_the_vllm_shrink_makes_a_mamba2_state_small_and_the_sglang_shrink_keeps_it() -> None:
    nemotron = fixture("nemotron-h-8b")
    small = shrink(nemotron, server="vllm")
    assert {k: small[k] for k in VLLM_MAMBA_STATE} == VLLM_MAMBA_STATE
    assert small["mamba_num_heads"] * small["mamba_head_dim"] == small["hidden_size"]
    sglang = shrink(nemotron)
    assert [sglang[k] for k in VLLM_MAMBA_STATE] == [nemotron[k] for k in VLLM_MAMBA_STATE], "SGLang's is unchanged"
    assert {k: v for k, v in small.items() if k not in VLLM_MAMBA_STATE} == {
        k: v for k, v in sglang.items() if k not in VLLM_MAMBA_STATE
    }
    assert shrink(fixture("llama-3.1-8b"), server="vllm") == shrink(fixture("llama-3.1-8b"))
    with pytest.raises(ValueError, match="server must be one of"):
        shrink(nemotron, server="trt")


# A third server's room, reached through the table alone (shrink names no server).
FAKE = consistency_facts.ConsistencyFacts(
    mamba_state={"mamba_num_heads": 4, "mamba_head_dim": 32, "ssm_state_size": 8, "n_groups": 2},
    shrinks_untied_mamba=True,
    pressed="evicted",
    pressure_consequence="nothing was evicted",
    fault_site="inside pressured ({hook})",
    fault_hooks={"": "Fake.evict"},
    fault_tally="installed {installed}",
    fault_problem="failed",
)


def test_a_server_added_to_the_table_gets_its_own_mamba_state(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(consistency_facts.TABLE, "fake", f"{__name__}:FAKE")
    small = shrink(fixture("nemotron-h-8b"), server="fake")
    assert {k: small[k] for k in FAKE.mamba_state} == FAKE.mamba_state
    assert shrink_module.small_mamba_state(fixture("nemotron-h-8b"), "fake") == FAKE.mamba_state


def test_prompts_are_seeded_and_skip_special_ids() -> None:
    w = Workload(requests=4, prompt_tokens=16, seed=7)
    a, b = prompts(w, 1024), prompts(w, 1024)
    assert a == b and len(a) == 4 and all(len(p) == 16 for p in a)
    assert all(FIRST_ID <= t < 1024 for p in a for t in p)
    assert prompts(Workload(requests=4, prompt_tokens=16, seed=8), 1024) != a
