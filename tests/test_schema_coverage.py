"""The shipped JSON schemas declare every key kvdoctor writes (``tests.schema_check.undeclared``).

The schemas stay open to additive keys (consumers must accept them), so ``jsonschema`` alone lets a key in that the
contract never mentions; every ``assert_valid`` also asks ``undeclared``. Here: it finds a key where it is
missing, and reads ``oneOf`` by the branch the value takes.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys

from tests.schema_check import undeclared


def _inspect(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "kvdoctor", "inspect", *args, "--json"], capture_output=True, text=True, check=False
    )
    return json.loads(out.stdout)


def test_a_real_document_is_fully_declared_and_a_new_key_is_found_where_it_sits() -> None:
    doc = _inspect("nemotron-h-8b", "--server", "vllm")
    assert doc["block_size"]["mamba_block_size"] and undeclared(doc, "inspect") == []
    grown = copy.deepcopy(doc)
    grown["block_size"]["surprise"] = 1
    grown["layer_specs"][0]["surprise"] = 1
    assert undeclared(grown, "inspect") == ["/block_size/surprise", "/layer_specs/0/surprise"]


def test_a_key_of_the_other_servers_branch_is_not_declared_by_it() -> None:
    """oneOf: a vLLM document is read by the vLLM branch only, so an SGLang-only key in it is found."""
    sglang, vllm = _inspect("inkling-small"), _inspect("llama-3.1-8b", "--server", "vllm")
    only_sglang = sorted(set(sglang) - set(vllm))
    assert only_sglang and undeclared(sglang, "inspect") == []
    mixed = {**vllm, only_sglang[0]: sglang[only_sglang[0]]}
    assert f"/{only_sglang[0]}" in undeclared(mixed, "inspect")
