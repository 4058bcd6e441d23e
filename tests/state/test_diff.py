"""The diff itself: a flipped byte anywhere a request or the padding slot lives turns it red."""

from __future__ import annotations

import torch

from kvdoctor.roundtrip.options import Reductions
from kvdoctor.state.diff import (
    FREE,
    PADDING,
    RESIDENT,
    Observations,
    capture_free,
    capture_padding,
    capture_request,
    diff,
    failing,
)
from kvdoctor.state.fill import fill_background, fill_requests
from kvdoctor.state.host_copy import CopyLedger
from kvdoctor.state.pools import admit, build_pools, plan_sizes, reduced_geometry
from tests.state.helpers import analysis


def _setup():
    a = analysis("inkling-small", "mxfp8", "--page-size", "128")
    geo = reduced_geometry(a, Reductions(layers=1, heads=1))
    pools = build_pools(a, geo, plan_sizes(2, 1, 40, 128, geo.window), torch.device("cpu"))
    gen = torch.Generator().manual_seed(3)
    states = fill_background(pools, gen)
    reqs = [admit(pools, rid, 40) for rid in range(2)]
    fill_requests(pools, reqs, gen, a.spec.kv_dtype)
    return a, (pools, states), reqs


def _observe(a, pooled, reqs, before, pad_before) -> Observations:
    pools, states = pooled
    after = {r.rid: capture_request(pools, r) for r in reqs}
    return Observations(
        before=before,
        at_visible={},
        after=after,
        retracted=[],
        residents=[r.rid for r in reqs],
        padding_before=pad_before,
        padding_after=capture_padding(pools),
        components=list(a.spec.names),
        free=capture_free(pools, [*before.values(), *after.values()], states),
    )


def test_untouched_pools_diff_green() -> None:
    a, pooled, reqs = _setup()
    pools = pooled[0]
    before = {r.rid: capture_request(pools, r) for r in reqs}
    frame = diff(_observe(a, pooled, reqs, before, capture_padding(pools)), CopyLedger())
    assert failing(frame) == []


def test_a_flipped_resident_scale_byte_is_found() -> None:
    a, pooled, reqs = _setup()
    pools = pooled[0]
    before = {r.rid: capture_request(pools, r) for r in reqs}
    pad = capture_padding(pools)
    slot = int(pools.req_to_token[reqs[1].row, 5])
    plane = next(p for p in pools.swa.planes if p.name == "v_scale") if pools.swa else None
    assert plane is not None and pools.full_to_swa is not None
    swa_slot = pools.full_to_swa[slot : slot + 1]
    plane.data[0, plane.units_of(swa_slot)[0], 0] ^= 0x01
    frame = diff(_observe(a, pooled, reqs, before, pad), CopyLedger())
    assert failing(frame) == [RESIDENT]
    resident = frame.loc[frame["name"] == RESIDENT].iloc[0]
    assert resident["mismatched_bytes"] == 1
    assert resident["first_request"] == 1 and resident["first_plane"] == "swa_kv_scales.v_scale"
    assert resident["first_position"] == 5


def test_a_write_to_slot_zero_is_found() -> None:
    a, pooled, reqs = _setup()
    pools = pooled[0]
    before = {r.rid: capture_request(pools, r) for r in reqs}
    pad = capture_padding(pools)
    assert pools.full is not None
    pools.full.planes[0].data[0, 0, 0] ^= 0x80
    assert failing(diff(_observe(a, pooled, reqs, before, pad), CopyLedger())) == [PADDING]


def test_a_write_to_a_slot_no_request_ever_held_is_found() -> None:
    a, pooled, reqs = _setup()
    pools = pooled[0]
    before = {r.rid: capture_request(pools, r) for r in reqs}
    pad = capture_padding(pools)
    held = {int(s) for r in reqs for s in pools.req_to_token[r.row, : r.kv_tokens]}
    assert pools.full is not None
    stray = next(s for s in range(1, pools.full.rows) if s not in held)
    pools.full.planes[1].data[0, stray, 3] ^= 0x10
    frame = diff(_observe(a, pooled, reqs, before, pad), CopyLedger())
    assert failing(frame) == [FREE]
    free = frame.loc[frame["name"] == FREE].iloc[0]
    assert free["mismatched_bytes"] == 1 and free["first_slot"] == stray
    assert free["first_plane"] == "full_kv.v"


def test_a_write_to_the_padding_row_of_req_to_token_is_found() -> None:
    # On a CPU device ``.cpu()`` returns the very tensor: the capture must copy, not alias.
    a, pooled, reqs = _setup()
    pools = pooled[0]
    before = {r.rid: capture_request(pools, r) for r in reqs}
    pad = capture_padding(pools)
    pools.req_to_token[0, 0] = 7
    assert failing(diff(_observe(a, pooled, reqs, before, pad), CopyLedger())) == [PADDING]
