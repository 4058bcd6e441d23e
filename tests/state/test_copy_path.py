"""The CPU copy path at realistic shape: several layers, several pages per request, scattered
slots, and a chunk size small enough that every backup is split into several chunks."""

from __future__ import annotations

import pytest

from kvdoctor.state.diff import FREE, PADDING, RESIDENT, SLOT_REUSE
from tests.state.helpers import roundtrip, row

CASES = [
    # page 16, chunk 7: a chunk never covers a whole page, so the gather/scatter path runs
    (("nemotron-h-8b", "fp8_e4m3", "--page-size", "16"), 7, 420, "missing-mamba"),
    # page 128 with page-interleaved MXFP8 scales, chunk 100: chunks straddle page boundaries
    (("inkling-small", "mxfp8", "--page-size", "128"), 100, 560, "drop-block-scale"),
]


@pytest.mark.parametrize(("model", "chunk", "tokens", "fault"), CASES, ids=["fp8-page16", "mxfp8-page128"])
def test_multi_layer_multi_page_chunked_round_trip_is_bit_exact(
    model: tuple[str, ...], chunk: int, tokens: int, fault: str
) -> None:
    layers = 3
    result = roundtrip(*model, requests=4, tokens=tokens, layers=layers, heads=2, chunk=chunk)
    assert result.ok, result.failing
    assert result.used.chunk == chunk and chunk * 2 < tokens // 2  # every request spans >2 chunks
    assert tokens // 2 > 2 * result.used.page_size  # every request spans >2 pages
    assert result.used.max_slot_runs > 1  # slots are scattered, not one contiguous run
    one_layer = roundtrip(*model, requests=4, tokens=tokens, layers=1, heads=2, chunk=chunk)
    for name in {r.name for r in result.components} - {PADDING, FREE, RESIDENT, SLOT_REUSE}:
        r = row(result, name)
        assert (r.copies_out, r.copies_in) == (1, 1), name
        if name.endswith("_kv") or name.endswith("_scales"):  # every layer's bytes are compared
            assert r.bytes == layers * row(one_layer, name).bytes, name
    red = roundtrip(*model, requests=4, tokens=tokens, layers=layers, heads=2, chunk=chunk, inject=fault)
    assert not red.ok and red.inject_matched
