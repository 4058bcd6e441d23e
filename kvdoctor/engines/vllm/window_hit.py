"""A sliding-window group's offload hit, as vLLM's offloading connector serves it from its CPU manager.

``roundtrip --server vllm --engine vllm`` moves each group's blocks out and back through vLLM's worker; for a
sliding-window (SWA) group whose request runs past its window, this step also asks vLLM's own scheduler-side code
whether a later request with the same prefix can be served: the stored window (``get_sliding_window_size_in_chunks``,
``offloading/config.py:61-72``) is stored in a real ``CPUOffloadingManager``, the prefix is looked up as the
connector does (``OffloadingConnectorScheduler._sliding_window_lookup`` with ``load_window_size_in_chunks``,
``offloading/scheduler.py:805-848``, ``117-134``), and the hit loads every chunk of the retained interval the block
manager allocates for it (``SlidingWindowManager.get_num_skipped_tokens``, ``v1/core/single_type_kv_cache_manager.py:
1182-1185``) through ``CPUOffloadingManager.prepare_load`` (``v1/kv_offload/cpu/manager.py:221-232``), which asserts
each chunk is stored. It moves no byte: the byte round trip moves the group's blocks.

kvdoctor restates only the glue (which chunks the store offers: the stored window's, ending at the request's last
full chunk; which the load asks for: the retained interval's, ``update_state_after_alloc``, scheduler.py:1396-1431).
One chunk is one block (``blocks_per_chunk`` 1, as the worker runs) and one block hash per chunk.

``swa-short-store`` (vllm#56701) gives each SWA group the retained tail of a multi-module MTP drafter
(``extra_retained_tokens``, kv_cache_planning.py:1636-1641) when the launch line has none, and has the connector's
store and lookup use the bare window, as vLLM did before the fix: the hit then loads a chunk never stored, and vLLM's
manager says so (exit 3, its message).
"""

from __future__ import annotations

import dataclasses
import types
from dataclasses import dataclass
from typing import Any

from kvdoctor._exceptions import DeploymentError, InputError
from kvdoctor.engines.vllm import _runtime as rt

__all__ = ["FAULT", "WindowHit", "retained_tail", "window_hits"]

FAULT = "swa-short-store"
CONFIG = "vllm.distributed.kv_transfer.kv_connector.v1.offloading.config"
SCHEDULER = "vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler"
PREPARE_LOAD = "v1/kv_offload/cpu/manager.py:231-232"


@dataclass(frozen=True)
class WindowHit:
    """One SWA group's hit: what the store kept, what the lookup reported, what the load asked for (chunks)."""

    group: int
    sliding_window: int  # tokens
    extra_retained_tokens: int  # the retained tail below the window (vLLM's SlidingWindowSpec)
    stored_chunks: int  # the stored window: the request's last chunks the store kept
    hit_tokens: int  # the prefix the lookup reported as servable
    loaded_chunks: int  # the chunks of the retained interval the hit loads (all of them stored: else exit 3)


def _is_window(spec: Any) -> bool:
    return type(spec).__name__ == "SlidingWindowSpec"


def retained_tail(windows: list[int], block_size: int, inject: str | None, asked: int) -> int:
    """The SWA groups' ``extra_retained_tokens``: ASKED, or for swa-short-store (when ASKED is 0) the shortest tail
    whose retained interval spans one chunk more than the bare window (2 tokens, a 3-module MTP, for a window that
    is a multiple of the block). Exit 2 when swa-short-store has no SWA group to act on."""
    if inject != FAULT:
        return asked
    if not windows:
        raise InputError(
            f"--inject {FAULT}: no KV-cache group of this launch line is a sliding window "
            "(try gemma-3-12b or gpt-oss-20b)"
        )
    if asked:
        return asked
    window = min(windows)
    return -(-window // block_size) * block_size - window + 2


def check_tokens(groups: list[Any], tokens: int, inject: str | None) -> None:
    """Exit 2 when swa-short-store's request does not run past its retained interval (the hit loads no chunk below
    the bare window, so the fault changes nothing)."""
    if inject != FAULT:
        return
    specs = [g.kv_cache_spec for g in groups if _is_window(g.kv_cache_spec)]
    need = max(s.sliding_window + s.extra_retained_tokens + 2 * s.block_size for s in specs)
    if tokens < need:
        raise InputError(
            f"--inject {FAULT} needs a request past its sliding window's retained interval: raise --tokens to at "
            f"least {need}"
        )


def window_hits(groups: list[Any], tokens: int, inject: str | None) -> list[WindowHit]:
    """Each SWA group's hit, served from vLLM's own CPU manager (exit 3 with vLLM's message when it cannot be)."""
    found = []
    for gi, g in enumerate(groups):
        spec = g.kv_cache_spec
        if _is_window(spec) and tokens // spec.block_size:
            found.append(_hit(gi, spec, tokens // spec.block_size, short=inject == FAULT))
    return found


def _hit(gi: int, spec: Any, chunks: int, *, short: bool) -> WindowHit:
    cfg, sched = rt.load(CONFIG), rt.load(SCHEDULER)
    base, cpu = rt.load("vllm.v1.kv_offload.base"), rt.load("vllm.v1.kv_offload.cpu.manager")
    managers = rt.load("vllm.v1.core.single_type_kv_cache_manager")
    per_chunk = spec.block_size
    # the connector's windows: vLLM 0.33's cover the retained tail; swa-short-store's are the bare window's
    windows = dataclasses.replace(spec, extra_retained_tokens=0) if short else spec
    stored = cfg.get_sliding_window_size_in_chunks(windows, per_chunk)
    group = sched.GroupOffloadConfig(
        group_idx=gi,
        tokens_per_block=spec.block_size,
        tokens_per_chunk=per_chunk,
        hashes_per_chunk=1,
        kv_event_group_spec=None,
        sliding_window_size_in_chunks=stored,
        kv_cache_spec=windows,
        manager_cls=managers.SlidingWindowManager,
    )
    keys = [base.make_offload_key(f"kvdoctor-chunk-{i}".encode(), gi) for i in range(chunks)]
    manager = cpu.CPUOffloadingManager(num_chunks=chunks)
    writer, reader = base.ReqContext(req_id="kvdoctor-store"), base.ReqContext(req_id="kvdoctor-hit")
    manager.on_new_request(writer)
    offered = keys[max(chunks - stored, 0) :]
    store = manager.prepare_store(offered, writer)
    manager.complete_store(store.keys_to_store, writer)
    manager.on_new_request(reader)
    connector = object.__new__(sched.OffloadingConnectorScheduler)  # its lookup reads only the manager
    connector.manager = manager
    end = connector._sliding_window_lookup(keys, stored, reader, group.load_window_size_in_chunks(chunks * per_chunk))
    hit = (end or 0) * per_chunk
    retained = types.SimpleNamespace(
        sliding_window=spec.sliding_window, extra_retained_tokens=spec.extra_retained_tokens
    )
    first = managers.SlidingWindowManager.get_num_skipped_tokens(retained, hit) // spec.block_size if hit else 0
    wanted = keys[first : end or 0]
    try:
        manager.prepare_load(wanted, reader)
    except AssertionError as exc:
        raise DeploymentError(
            f"vLLM's CPU offloading manager cannot serve the sliding-window hit of group g{gi} ({PREPARE_LOAD}): "
            f"{exc}; the store kept the last {stored} chunks, the hit of {hit} tokens loads {len(wanted)} "
            f"(window {spec.sliding_window} - 1 + {spec.extra_retained_tokens} retained tokens)"
        ) from None
    return WindowHit(gi, spec.sliding_window, spec.extra_retained_tokens, stored, hit, len(wanted))
