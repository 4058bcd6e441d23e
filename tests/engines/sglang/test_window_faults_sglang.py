"""Sliding-window eviction through SGLang 0.5.23's own code (``make test-sglang``, .venv-sglang): its all-SWA radix tree
(``PureSWARadixCache``), its eviction (``ScheduleBatch._evict_swa`` -> ``evict_sliding_windows`` ->
``free_swa_out_of_window_slots``) and its finish insert (``RadixCache.checkpoint``), on a recording allocator and a
``req_to_token`` table (the pools' bytes play no part: these are slot ids).

- ``swa-early-evict`` (kvdoctor.engines.sglang.window_faults) wrapped around the real ``_evict_swa`` frees slots still
  inside the window; disarmed, SGLang frees only what left it.
- sglang#31486 is live in 0.5.23: the finish insert keys ``[0, up_to)`` whenever ``swa_evict_floor`` is 0 (every
  all-SWA model but a prefill-aware one, ``srt/mem_cache/radix_cache.py:513-521``), so the slots the window already
  freed go into the tree, and the tree's eviction frees them a second time. When SGLang fixes it this test fails and
  says so; kvdoctor's ``swa-recache-evicted`` fault would then have something to put back.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.sglang

WINDOW, PROMPT, LENGTH, ROW = 8, 8, 40, 1


class Allocator:
    """The slots the tree and the eviction give back, in order (SGLang's allocator would put them on its free list)."""

    page_size = 1
    device = "cpu"

    def __init__(self) -> None:
        self.freed: list[int] = []

    def free_swa_segment(self, index: Any, *, start_pos: int) -> None:
        self.freed += [int(i) for i in index.tolist()]

    free_segment = free_swa_segment

    def free(self, index: Any) -> None:
        self.freed += [int(i) for i in index.tolist()]

    def available_size(self) -> int:
        return 0

    swa_available_size = available_size


def _tree() -> tuple[Any, Allocator, Any]:
    import torch
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.pure_swa_radix_cache import PureSWARadixCache

    table = types.SimpleNamespace(req_to_token=torch.zeros(4, 256, dtype=torch.int32), device="cpu")
    table.write = lambda where, values: table.req_to_token.__setitem__(where, values)
    table.req_to_token[ROW, :LENGTH] = torch.arange(100, 100 + LENGTH)  # slot of position p: 100 + p
    allocator = Allocator()
    params = CacheInitParams(disable=False, req_to_token_pool=table, token_to_kv_pool_allocator=allocator, page_size=1)
    params.sliding_window_size = WINDOW
    return PureSWARadixCache(params), allocator, table


def _prefilled(tree: Any) -> Any:
    """A request whose prompt the tree checkpointed after its prefill (``checkpoint_kv_cache``)."""
    from sglang.srt.managers.schedule_batch import ReqKvInfo

    ids = list(range(1000, 1000 + LENGTH))
    req = types.SimpleNamespace(
        rid="r", kv=ReqKvInfo(req_pool_idx=ROW), extra_key=None, cache_salt=None, priority=0, lock=None,
        last_node=None, origin_input_ids=ids[:PROMPT], full_untruncated_fill_ids=ids[:PROMPT], ids=ids,
    )  # fmt: skip
    tree.checkpoint(req, up_to=PROMPT)
    assert req.kv.cache_protected_len == PROMPT
    return req


def _evict(tree: Any, req: Any, pre_len: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang's ``ScheduleBatch._evict_swa`` for REQ at PRE_LEN, with ``swa-early-evict`` installed on it."""
    from sglang.srt.managers import schedule_batch

    from kvdoctor.engines.sglang import window_faults

    monkeypatch.setattr(schedule_batch.ScheduleBatch, "_evict_swa", schedule_batch.ScheduleBatch._evict_swa)
    window_faults.swa_early_evict(window_faults.EARLY)[window_faults.SCHEDULE_BATCH_MODULE](schedule_batch)
    schedule_batch.ScheduleBatch._evict_swa(types.SimpleNamespace(tree_cache=tree), req, pre_len)


@pytest.mark.parametrize("armed", [True, False])
def test_swa_early_evict_frees_in_window_slots_through_sglang_s_eviction(
    armed: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvdoctor.engines import arming
    from kvdoctor.engines.sglang import server_hooks, window_faults

    monkeypatch.setenv(server_hooks.LOG_ENV, str(tmp_path / "hook.log"))
    monkeypatch.setenv(arming.ARM_ENV, str(tmp_path / "armed"))
    arming.arm(tmp_path / "armed", *((window_faults.EARLY,) if armed else ()))
    tree, allocator, _ = _tree()
    req = _prefilled(tree)
    pre_len = LENGTH - 1
    _evict(tree, req, pre_len, monkeypatch)
    in_window = {100 + p for p in range(pre_len - WINDOW, pre_len)}
    freed_in_window = sorted(set(allocator.freed) & in_window)
    if armed:  # half the window (4 of 8 positions) freed while the request still attends to them
        assert freed_in_window == [100 + p for p in range(pre_len - WINDOW, pre_len - WINDOW // 2)]
    else:
        assert freed_in_window == [] and allocator.freed == [100 + p for p in range(PROMPT, pre_len - WINDOW)]


def test_sglang_0_5_23_re_caches_window_evicted_slots_and_frees_them_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    from kvdoctor.engines import arming
    from kvdoctor.engines.sglang import server_hooks

    monkeypatch.setenv(server_hooks.LOG_ENV, str(tmp_path / "hook.log"))
    monkeypatch.setenv(arming.ARM_ENV, str(tmp_path / "armed"))
    arming.disarm(tmp_path / "armed")  # SGLang's own eviction
    tree, allocator, _ = _tree()
    req = _prefilled(tree)
    _evict(tree, req, LENGTH - 1, monkeypatch)
    window_freed = list(allocator.freed)
    assert window_freed == [100 + p for p in range(PROMPT, LENGTH - 1 - WINDOW)]
    allocator.freed.clear()
    req.full_untruncated_fill_ids = req.ids
    tree.checkpoint(req, up_to=LENGTH)  # the finish insert (release_kv_cache -> tree_cache.checkpoint)
    tree.unlock(req.lock)
    tree.evict(EvictParams(num_tokens=10**6))
    assert sorted(set(window_freed) & set(allocator.freed)) == window_freed, "every window-freed slot freed again"
