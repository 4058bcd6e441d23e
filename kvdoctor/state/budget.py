"""How much memory a round trip will take, known before a byte of it is allocated.

A round trip holds, at its peak: the pools (every KV plane, scale plane and mamba slot, the
request-to-token table), the host copies the diff compares (each request before retraction, each
restored request when it becomes runnable, every live request at the end, and the slots no request
held), the backups in the host copy arena (64 MiB slabs), and the temporaries of the fill (a float32
draw and its cast) and of the background redraw (one whole plane). ``estimate`` adds these up from
the (reduced) geometry and the run's sizing, in bytes, erring high: every request is counted at the
longest length. ``check_budget`` refuses (exit 2) a run that would not fit, with the estimate and the
largest ``--requests`` that would, instead of letting a failed allocation end it with a traceback.

On CUDA the pools and fill temporaries are device memory (``torch.cuda.mem_get_info``) and the rest is
host memory; on CPU it is all host memory (``psutil``'s available memory). A headroom is kept free on
each: HEADROOM of the total, and at least MIN_HEADROOM.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kvdoctor._exceptions import InputError
from kvdoctor.core.sglang.analysis import Analysis
from kvdoctor.core.sglang.geometry import AttentionGeometry
from kvdoctor.state.host_copy import HostArena
from kvdoctor.state.pools import TORCH_DTYPES, Geometry, PoolSizes, plan_sizes, storage_dtype

HEADROOM = 0.10  # of the device's (or host's) total memory, left for everything else
MIN_HEADROOM = 512 * 2**20
INDEX_BYTES = 8  # int64 request-to-token and full-to-SWA entries
FLOAT32_BYTES = 4  # the fill draws float32 values before casting to the pool's dtype


def _gib(n: int) -> str:
    return f"{n / 2**30:,.2f} GiB"


def retracted_for(requests: int, fraction: float) -> int:
    """How many of REQUESTS a run retracts: at least one, and at least one stays resident."""
    return min(requests - 1, max(1, round(requests * fraction)))


@dataclass(frozen=True)
class MemoryEstimate:
    """Peak bytes of one round trip, by what holds them."""

    pools: int  # every plane, the request-to-token table and the full-to-SWA map
    fill: int  # the float32 draw and its cast for the widest plane of one admission
    captures: int  # host copies of each request's state: before, at visibility, after
    free_captures: int  # host copies (expected and found) of the slots no request held
    backups: int  # the copy arena: the retracted requests' state, in whole slabs
    redraw: int  # the background redraw of the widest plane, and its free slots indexed out

    @property
    def device_bytes(self) -> int:
        """What lives on the pools' device."""
        return self.pools + self.fill

    @property
    def host_bytes(self) -> int:
        """What lives in host memory whatever the device."""
        return self.captures + self.free_captures + self.backups + self.redraw

    @property
    def total(self) -> int:
        return self.device_bytes + self.host_bytes


@dataclass(frozen=True)
class _SubPool:
    rows: int  # token rows (slots), padding included
    row_bytes: int  # bytes of one slot across every plane of the sub-pool, per layer
    widest_plane_row: int  # bytes of one slot of the widest plane, per layer
    element_bytes: int  # element size of the widest plane
    layers: int
    kept: int  # token rows one request of the longest length keeps here


def _attention(geo: AttentionGeometry, analysis: Analysis, rows: int, kept: int) -> _SubPool:
    kv = analysis.spec.kv_dtype
    item = storage_dtype(kv.store_dtype).itemsize
    plane_rows = [heads * dim * item for heads, dim in geo.shapes]
    if kv.block_scaled and not geo.mla and kv.scale_block:
        plane_rows += [heads * max(1, dim // kv.scale_block) for heads, dim in geo.shapes]
    return _SubPool(rows, sum(plane_rows), max(plane_rows), item, geo.layers, kept)


def _sub_pools(analysis: Analysis, geo: Geometry, sizing: PoolSizes) -> list[_SubPool]:
    """The token-indexed sub-pools build_pools allocates for GEO at SIZING."""
    page, tokens = sizing.page_size, sizing.max_tokens
    window_rows = min(tokens, (geo.window or tokens) + page)
    subs = []
    if geo.full is not None:
        subs.append(_attention(geo.full, analysis, sizing.full_pages * page + page, tokens))
        if geo.swa is not None:
            subs.append(_attention(geo.swa, analysis, sizing.swa_pages * page + page, window_rows))
    elif geo.swa is not None:  # all-SWA: one token space
        subs.append(_attention(geo.swa, analysis, sizing.full_pages * page + page, tokens))
    return subs


def _mamba_slot_bytes(geo: Geometry) -> int:
    rec = geo.recurrent
    if rec is None:
        return 0
    conv = sum(math.prod(s) for s in rec.conv_shapes) * TORCH_DTYPES[rec.conv_dtype].itemsize
    temporal = math.prod(rec.temporal_shape) * TORCH_DTYPES[rec.temporal_dtype].itemsize
    return (conv + temporal) * rec.layers


def estimate(analysis: Analysis, geo: Geometry, sizing: PoolSizes) -> MemoryEstimate:
    """Peak bytes of a round trip of SIZING on GEO (see the module docstring for what is counted)."""
    subs = _sub_pools(analysis, geo, sizing)
    slot = _mamba_slot_bytes(geo)
    live = sizing.live_requests
    table = (live + 1) * sizing.max_tokens * INDEX_BYTES
    mapping = subs[0].rows * INDEX_BYTES if len(subs) > 1 or (subs and geo.full is None) else 0
    pools = sum(s.rows * s.row_bytes * s.layers for s in subs) + (sizing.mamba_slots + 1) * slot + table + mapping
    per_request = sum(s.kept * s.row_bytes * s.layers for s in subs) + slot
    captures = (2 * sizing.requests + 2 * sizing.retracted) * per_request
    least = max(2, sizing.max_tokens // 2) - 1  # the shortest request's KV tokens
    touched = sizing.requests + 2 * sizing.retracted  # residents, intruders and restored requests
    free_captures = 2 * sum(max(0, s.rows - touched * min(least, s.kept)) * s.row_bytes * s.layers for s in subs)
    slab = HostArena(pinned=False).slab_bytes
    backups = -(-(sizing.retracted * per_request) // slab) * slab
    widest = max((s.rows * s.widest_plane_row * s.layers for s in subs), default=0)
    widest = max(widest, (sizing.mamba_slots + 1) * slot)
    draws = [
        sizing.requests * s.kept * s.widest_plane_row * s.layers * (FLOAT32_BYTES + s.element_bytes) // s.element_bytes
        for s in subs
    ]
    fill = max([*draws, sizing.requests * slot * 3], default=0)
    return MemoryEstimate(pools, fill, captures, free_captures, backups, 2 * widest)


@dataclass(frozen=True)
class Capacity:
    """Bytes a run may use: on the device (None when it is the host) and on the host."""

    device: int | None
    host: int


def _usable(free: int, total: int) -> int:
    return max(0, free - max(MIN_HEADROOM, int(total * HEADROOM)))


def capacity(device: torch.device) -> Capacity:
    """What DEVICE and the host can hold now, less the headroom."""
    import psutil

    memory = psutil.virtual_memory()
    host = _usable(memory.available, memory.total)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return Capacity(_usable(free, total), host)
    return Capacity(None, host)


def fits(est: MemoryEstimate, room: Capacity) -> bool:
    if room.device is None:
        return est.total <= room.host
    return est.device_bytes <= room.device and est.host_bytes <= room.host


def largest_fitting(analysis: Analysis, geo: Geometry, sizing: PoolSizes, fraction: float, room: Capacity) -> int:
    """The most requests (at least 2, at most SIZING's) whose round trip fits ROOM; 0 when none does."""

    def ok(requests: int) -> bool:
        trial = plan_sizes(requests, retracted_for(requests, fraction), sizing.max_tokens, sizing.page_size, geo.window)
        return fits(estimate(analysis, geo, trial), room)

    low, high = 1, sizing.requests  # ok(low) is assumed, ok(high) is known to be False
    if not ok(2):
        return 0
    low = 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if ok(mid) else (low, mid)
    return low


def check_budget(
    analysis: Analysis,
    geo: Geometry,
    sizing: PoolSizes,
    device: torch.device,
    *,
    fraction: float,
    room: Capacity | None = None,
) -> MemoryEstimate:
    """The estimate, or an ``InputError`` (exit 2) naming it and the largest --requests that fits."""
    est = estimate(analysis, geo, sizing)
    room = room or capacity(device)
    if fits(est, room):
        return est
    where = (
        f"{_gib(est.total)} of host memory, {_gib(room.host)} available"
        if room.device is None
        else f"{_gib(est.device_bytes)} on {device} ({_gib(room.device)} free) and "
        f"{_gib(est.host_bytes)} of host memory ({_gib(room.host)} available)"
    )
    best = largest_fitting(analysis, geo, sizing, fraction, room)
    advice = (
        f"the largest --requests that fits is {best}"
        if best
        else "not even 2 requests fit: lower --tokens or reduce with --layers / --heads"
    )
    raise InputError(
        f"this round trip needs about {where} ({sizing.requests} requests of up to "
        f"{sizing.max_tokens} tokens); {advice}"
    )
