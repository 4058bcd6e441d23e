"""The copy engine: runs and indexed paths agree with plain indexing; the arena reuses memory."""

from __future__ import annotations

import torch

from kvdoctor.state.host_copy import HostArena, Mover, contiguous_runs, filter_rows
from kvdoctor.state.pools import Plane


def _plane(layers: int = 3, rows: int = 64, width: int = 24) -> Plane:
    data = torch.randint(0, 256, (layers, rows, width), dtype=torch.uint8)
    return Plane("full_kv", "k", data, lambda slots: slots)


def test_contiguous_runs() -> None:
    units = torch.tensor(list(range(5, 21)) + list(range(40, 60)))
    assert contiguous_runs(units) == [(0, 5, 16), (16, 40, 20)]
    assert contiguous_runs(torch.tensor([3, 9, 1, 7])) is None
    assert contiguous_runs(torch.tensor([], dtype=torch.int64)) == []


def test_offload_matches_plain_indexing_on_both_paths() -> None:
    plane = _plane()
    mover = Mover(torch.device("cpu"), chunk=20)
    for slots in (torch.arange(5, 45), torch.randperm(63)[:30] + 1):
        assert (contiguous_runs(slots[:20]) is not None) == bool((slots.diff() == 1).all())
        chunks = mover.offload([plane], slots)
        got = torch.cat([c["k"] for c in chunks], dim=1)
        assert torch.equal(got, plane.data[:, slots])


def test_restore_writes_exactly_the_new_slots() -> None:
    plane = _plane()
    mover = Mover(torch.device("cpu"), chunk=16)
    for slots in (torch.arange(1, 33), torch.randperm(63)[:20] + 1):
        saved = torch.randint(0, 256, (3, slots.numel(), 24), dtype=torch.uint8)
        before = plane.data.clone()
        chunks = [{"k": saved[:, i : i + 16]} for i in range(0, slots.numel(), 16)]
        mover.restore(chunks, [plane], slots)
        assert torch.equal(plane.data[:, slots], saved)
        untouched = torch.ones(64, dtype=torch.bool)
        untouched[slots] = False
        assert torch.equal(plane.data[:, untouched], before[:, untouched])


def test_arena_reuses_its_slabs_after_reset() -> None:
    arena = HostArena(pinned=False, slab_bytes=1024)
    first = arena.take((4, 100))
    arena.take((2, 300))
    held = arena.held_bytes
    arena.reset()
    again = arena.take((4, 100))
    assert again.data_ptr() == first.data_ptr()
    assert arena.held_bytes == held


def test_filter_rows_keeps_the_masked_rows_in_order() -> None:
    plane = _plane(layers=2, width=4)
    rows = torch.randint(0, 256, (2, 10, 4), dtype=torch.uint8)
    chunks = [{"k": rows[:, :6]}, {"k": rows[:, 6:]}]
    keep = torch.tensor([True, False] * 5)
    kept = filter_rows(chunks, [plane], keep, chunk=3)
    assert torch.equal(torch.cat([c["k"] for c in kept], dim=1), rows[:, keep])
    assert [c["k"].shape[1] for c in kept] == [3, 2]
