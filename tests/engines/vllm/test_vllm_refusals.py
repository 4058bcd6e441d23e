"""vLLM's own start-up checks against the rule model's KVD114, its cited lines, and its generated tables.

Runs in .venv-vllm/ (``make test-vllm``); skipped where vLLM is not installed. Every ``vllm.*`` object
here is the installed wheel's.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvdoctor.core.cite import Cite
from kvdoctor.core.vllm import rules
from kvdoctor.core.vllm.analysis import analyze_vllm

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[3]
REFUSES = "KVD114-VLLM-REFUSES"


def _vllm_root() -> Path:
    import vllm

    return Path(vllm.__file__).parent


@pytest.mark.parametrize(
    ("model", "tp", "refusals"),
    [
        ("llama-3.1-8b", "3", 2),
        ("llama-3.1-8b", "2", 0),
        ("llama-3.1-8b", "16", 0),
        ("llama-3.1-8b", "64", 1),
        ("deepseek-v3", "3", 1),
        ("nemotron-h-8b", "2", 0),
    ],
)
def test_vllms_own_checks_raise_exactly_what_the_rule_model_reports(model: str, tp: str, refusals: int) -> None:
    from kvdoctor.engines.vllm.inspect import beside, parallel_refusals

    analysis = analyze_vllm(model, ["-tp", tp])
    assert [r.message for r in analysis.refusals] == parallel_refusals(analysis)
    assert len(analysis.refusals) == refusals
    answers = beside(analysis)
    assert not answers.drifts, answers.drifts
    assert not [h for h in answers.hazards() if h.code == REFUSES]  # the rule model's KVD114 already says it


def test_a_refusal_the_rule_model_missed_is_drift_and_vllms_own_kvd114() -> None:
    """Teeth: take the rule model's refusals away and the installed vLLM's answer must still fail the run."""
    from kvdoctor.engines.vllm.inspect import beside

    analysis = dataclasses.replace(analyze_vllm("llama-3.1-8b", ["-tp", "3"]), refusals=())
    hazards = beside(analysis).hazards()
    codes = [h.code for h in hazards]
    assert "KVD115-VLLM-DRIFT" in codes
    live = [h.message for h in hazards if h.code == REFUSES]
    assert any("Total number of attention heads (32) must be divisible by tensor parallel size (3)." in m for m in live)


def test_cli_engine_vllm_tp_3_is_refused_not_passed() -> None:
    env = {**os.environ, "COLUMNS": "200", "VLLM_TARGET_DEVICE": "cpu"}
    argv = [sys.executable, "-m", "kvdoctor", "inspect", "llama-3.1-8b", "--server", "vllm", "--engine", "vllm"]
    out = subprocess.run([*argv, "-tp", "3", "--strict"], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 1, out.stderr
    assert REFUSES in out.stdout and "KVD115-VLLM-DRIFT" not in out.stdout


# --- every citation of the vLLM rule model opens in the installed vLLM ---

CITES = [(name, c) for name, c in vars(rules).items() if isinstance(c, Cite)]
CITES += [(f"CONNECTORS[{n}]", r.where) for n, r in rules.CONNECTORS.items()]
CITES += [(f"CITATIONS[{i}]", c) for i, c in enumerate(rules.CITATIONS) if c not in {c for _, c in CITES}]
# The refusal citations name their symbol in the cited lines.
NAMED = {"TP_HEADS": "total_num_attention_heads", "TP_KV_HEADS": "divide", "DIVIDE": "def ensure_divisibility"}
NAMED["CONFIG_LOADER"] = "AutoConfig.from_pretrained"
NAMED["OFFLOAD_PREFIX_CACHING"] = "--enable-prefix-caching to align block sizes"
NAMED |= {  # max_model_len (core/vllm/model_len.py) and the Mamba block it sizes
    "MAX_LEN": "def _get_and_verify_max_len",
    "MAX_LEN_CALL": "def get_and_verify_max_len",
    "MAX_LEN_DERIVE": "def derive_max_model_len_and_key",
    "MAX_LEN_ROPE": "derived_max_model_len *= scaling_factor",
    "MAX_LEN_ROPE_NESTED": "def is_rope_parameters_nested",
    "MAX_LEN_ROPE_LEGACY": "def patch_legacy_rope_type",
    "MAX_LEN_CHECK": "User-specified max_model_len",
    "MAX_LEN_FIELD": "Field(default=None, ge=-1)",
    "MAX_LEN_POSITIVE": "max_model_len must be a positive integer",
    "MAX_LEN_FLAG": "def human_readable_int_or_auto",
    "MAMBA_BLOCK_MAX_LEN": "cache_config.mamba_block_size = model_config.max_model_len",
    "MAMBA_SPEC_BLOCK": "block_size=mamba_block_size",
}
NAMED |= {  # per-token-head KV dtypes (rules.PER_TOKEN_HEAD): fp32 scales inside the page
    "PER_TOKEN_HEAD_CONTENT": "content = (hs_k + hs_v) * get_dtype_size(spec.dtype) + 2 * scale_bytes",
    "PER_TOKEN_HEAD_BACKEND": '"fp8_per_token_head",',
    "PER_TOKEN_HEAD_CELL": "[K(hs) | K_scale(pad) | V(hs) | V_scale(pad)]",
    "PER_TOKEN_HEAD_APPLIED": "spec = customize_attention_spec(",
    "PER_TOKEN_HEAD_LAYOUT": "LBNHC = (0, 1, 3, 2, 4)",
    "PER_TOKEN_HEAD_MODES": "KVQuantMode.INT4_PER_TOKEN_HEAD,",
    "PER_TOKEN_HEAD_STORAGE": '"fp8_per_token_head": torch.uint8,',
    "PER_TOKEN_HEAD_INT4": "hides a 4-bit zero-point in the scale's low mantissa bits",
}


def test_every_citation_the_rules_make_is_checked() -> None:
    assert {c for _, c in CITES} == set(rules.CITATIONS) and {c.server for c in rules.CITATIONS} == {"vllm"}


@pytest.mark.parametrize(("name", "cite"), CITES, ids=[n for n, _ in CITES])
def test_every_cited_range_is_inside_the_installed_file(name: str, cite: Cite) -> None:
    path = _vllm_root() / cite.path
    assert path.is_file(), f"{name}: {cite} names no file in the installed vLLM"
    lines = path.read_text(encoding="utf-8").splitlines()
    assert 1 <= cite.start <= cite.end <= len(lines), f"{name}: {cite} is outside {path} ({len(lines)} lines)"
    if name in NAMED:
        text = "\n".join(lines[cite.start - 1 : cite.end])
        assert NAMED[name] in text, f"{name}: {cite} does not show {NAMED[name]!r}:\n{text}"


def test_the_refusal_messages_are_vllms_own_words() -> None:
    model = (_vllm_root() / "config" / "model.py").read_text(encoding="utf-8")
    assert re.search(r"Total number of attention heads \(\{total_num_attention_heads\}\)", model)
    assert "must be divisible by tensor parallel size " in model
    utils = (_vllm_root() / "distributed" / "utils.py").read_text(encoding="utf-8")
    assert 'f"{numerator} is not divisible by {denominator}"' in utils


def _cited(cite: Cite) -> str:
    return "\n".join((_vllm_root() / cite.path).read_text(encoding="utf-8").splitlines()[cite.start - 1 : cite.end])


def test_the_length_rules_restate_vllms_own_lists() -> None:
    """The length keys in vLLM's order, the RoPE types whose length is already scaled, and the refusal's words."""
    derive = _cited(rules.MAX_LEN_DERIVE)
    assert re.findall(r'^\s+"(\w+)",$', derive, re.M) == list(rules.MAX_LEN_KEYS)
    rope = _cited(rules.MAX_LEN_ROPE)
    start = rope.index("if rope_type not in (")
    listed = rope[start : rope.index("):", start)]
    assert set(re.findall(r'"(\w+)"', listed)) == rules.ROPE_PRESCALED
    assert f"default_max_len = {rules.DEFAULT_MAX_MODEL_LEN}" in _cited(rules.MAX_LEN)
    check = _cited(rules.MAX_LEN_CHECK)
    for words in (
        "User-specified max_model_len (",
        ") is greater ",
        "than the derived max_model_len (",
        " or model_max_length=",
        " in model's config.json).",
        "To allow overriding this maximum, set ",
        "the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.",
    ):
        assert words in check and words.strip() in rules.MAX_LEN_REFUSED, words


# --- the generated tables are what the generator reads from this vLLM ---


@pytest.mark.parametrize(
    ("what", "module"), [("flags", "server_flags.py"), ("model-types", "model_types.py")], ids=["flags", "model-types"]
)
def test_the_generated_vllm_tables_are_what_the_script_reads(what: str, module: str) -> None:
    script = ROOT / "scripts" / "vllm-tables.py"
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu"}
    out = subprocess.run(
        [sys.executable, str(script), what, str(_vllm_root())], capture_output=True, text=True, timeout=300, env=env
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip("\n") == (ROOT / "kvdoctor" / "core" / "vllm" / "_generated" / module).read_text().rstrip(
        "\n"
    )
