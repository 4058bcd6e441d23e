"""Each known silent failure, injected, turns the verdict red and names the right component."""

from __future__ import annotations

import pytest

from kvdoctor._exceptions import InputError
from kvdoctor.core import faults as registry
from kvdoctor.core.faults import Target
from kvdoctor.state.faults import FAULTS
from tests.state.helpers import roundtrip, row

# Inkling with page-interleaved MXFP8 has every component: full and SWA KV, both scale planes,
# conv state; its KV pool (SWAKVPool) leaves the recurrent state to the caller.
INKLING = ("inkling-small", "mxfp8", "--page-size", "128")
# A HybridLinearKVPool model: the pool's own copy carries the recurrent state.
QWEN_NEXT = ("qwen3-next-80b-a3b", "mxfp8", "--page-size", "128")


def _red(model: tuple[str, ...], fault: str) -> list[str]:
    result = roundtrip(*model, inject=fault)
    assert not result.ok
    assert result.injected == fault
    return result.failing


def test_the_model_implements_exactly_the_registry_s_model_faults() -> None:
    """How each fault is done lives here, what it is in the registry: the two name the same faults, in order."""
    assert list(FAULTS) == list(registry.names(server="sglang", target=Target.MODEL))
    assert [f.summary for f in FAULTS.values()] == [f.does for f in registry.select(target=Target.MODEL)]


def test_baseline_is_green() -> None:
    assert roundtrip(*INKLING).ok
    assert roundtrip(*QWEN_NEXT).ok


def test_missing_mamba() -> None:
    assert _red(INKLING, "missing-mamba") == ["conv_state"]
    result = roundtrip(*INKLING, inject="missing-mamba")
    assert (row(result, "conv_state").copies_out, row(result, "conv_state").copies_in) == (0, 0)
    assert row(result, "conv_state").mismatched_bytes > 0


def test_missing_mamba_on_a_pool_that_claims_to_carry_it() -> None:
    assert _red(QWEN_NEXT, "missing-mamba") == ["conv_state", "temporal_state"]


def test_double_mamba_bytes_agree_but_the_ledger_flags_it() -> None:
    result = roundtrip(*INKLING, inject="double-mamba")
    assert result.failing == ["conv_state"]
    conv = row(result, "conv_state")
    assert conv.equal and conv.mismatched_bytes == 0
    assert not conv.ledger_ok
    assert (conv.copies_out, conv.copies_in) == (2, 2)
    assert _red(QWEN_NEXT, "double-mamba") == ["conv_state", "temporal_state"]


def test_drop_block_scale() -> None:
    assert _red(INKLING, "drop-block-scale") == ["full_kv_scales", "swa_kv_scales"]


def test_drop_swa() -> None:
    assert _red(INKLING, "drop-swa") == ["swa_kv", "swa_kv_scales"]


def test_host_pool_on_ssm() -> None:
    result = roundtrip(*INKLING, inject="host-pool-on-ssm")
    assert result.backend == "host_pool"
    assert result.failing == ["conv_state"]


def test_restore_order() -> None:
    result = roundtrip(*INKLING, inject="restore-order")
    assert result.failing == ["conv_state"]
    # the final bytes are right; what is wrong is what the request saw when it became runnable
    assert row(result, "conv_state").ledger_ok
    assert _red(QWEN_NEXT, "restore-order") == ["conv_state", "temporal_state"]


def test_clobber_padding() -> None:
    result = roundtrip(*INKLING, inject="clobber-padding")
    assert result.failing == ["padding_slot"]
    assert row(result, "padding_slot").first_slot == 0


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_fault_names_its_declared_components(fault: str) -> None:
    result = roundtrip(*INKLING, inject=fault)
    assert result.failing == result.expected_red


@pytest.mark.parametrize(
    ("model", "fault"),
    [
        ("llama-3.1-8b", "drop-swa"),
        ("llama-3.1-8b", "missing-mamba"),
        ("llama-3.1-8b", "restore-order"),
    ],
)
def test_fault_that_cannot_apply_is_refused(model: str, fault: str) -> None:
    with pytest.raises(InputError, match=fault):
        roundtrip(model, "bf16", inject=fault)


def test_drop_block_scale_needs_scales() -> None:
    with pytest.raises(InputError, match="MXFP8"):
        roundtrip("inkling-small", "bf16", inject="drop-block-scale")


def test_unknown_fault() -> None:
    with pytest.raises(InputError, match="unknown fault"):
        roundtrip("inkling-small", inject="nope")
