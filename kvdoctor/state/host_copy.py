"""``get_cpu_copy`` / ``load_cpu_copy`` for each pool class, on one batched, chunked copy engine.

SGLang's pools copy one layer and one 8192-slot chunk at a time (memory_pool.py:2791-2834,
4131-4186). The bytes that must travel are the same here, but one ``index_select`` gathers a chunk
of every layer at once into a host buffer (pinned on CUDA, copied non-blocking on a side stream),
so host and device memory stay bounded by one chunk while the per-layer launch overhead is gone.

What each pool class carries (memory_pool.py, swa_memory_pool.py at rules.RULES_REVISION):

* a token pool (MHA, MXFP8, MLA): its payload planes, and for MXFP8 the K and V scale planes;
* ``SWAKVPool``: the full sub-pool, then the SWA sub-pool's *mapped* rows only, with the mask of
  which rows those were (out-of-window tokens map to the padding slot and are not copied);
* ``HybridLinearKVPool``: the full sub-pool and, because ``cpu_copy_carries_mamba`` is True, the
  request's mamba slot.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from kvdoctor.core.sglang import rules
from kvdoctor.state.pools import MambaPool, Plane, Pools

# chunk -> plane name -> host bytes (layers, units, unit_bytes)
HostChunks = list[dict[str, torch.Tensor]]


@dataclass
class CopyLedger:
    """Every copy event: (component, direction, request, bytes), so duplicates and gaps show."""

    events: list[tuple[str, str, int, int]] = field(default_factory=list)

    def record(self, component: str, direction: str, rid: int, nbytes: int) -> None:
        self.events.append((component, direction, rid, nbytes))

    def record_chunks(self, chunks: HostChunks, planes: list[Plane], direction: str, rid: int) -> None:
        """One event per component per call: the bytes of every plane of that component moved."""
        by_component: dict[str, int] = {}
        names = {p.name: p.component for p in planes}
        for chunk in chunks:
            for name, tensor in chunk.items():
                comp = names[name]
                by_component[comp] = by_component.get(comp, 0) + tensor.numel()
        for comp, nbytes in by_component.items():
            self.record(comp, direction, rid, nbytes)


@dataclass(frozen=True)
class CopyPolicy:
    """Which components a pool's CPU copy moves; a fault swaps in one that leaves some behind."""

    dropped: frozenset[str] = frozenset()

    def carried(self, planes: list[Plane]) -> list[Plane]:
        return [p for p in planes if p.component not in self.dropped]


class HostArena:
    """Reusable host memory for backups: a bump allocator over slabs kept between rounds.

    A fresh host allocation costs more than the copy into it (the kernel zeroes every page on first
    touch; pinning costs more still), so backups are carved from slabs that survive ``reset``.
    ``reset`` may only be called once every backup carved since the last reset has been restored.
    """

    ALIGN = 64

    def __init__(self, pinned: bool, slab_bytes: int = 64 << 20) -> None:
        self.pinned = pinned
        self.slab_bytes = slab_bytes
        self.slabs: list[torch.Tensor] = []
        self.slab = 0
        self.offset = 0

    def take(self, shape: tuple[int, ...]) -> torch.Tensor:
        nbytes = math.prod(shape)
        while self.slab < len(self.slabs):
            slab = self.slabs[self.slab]
            if self.offset + nbytes <= slab.numel():
                view = slab[self.offset : self.offset + nbytes].view(shape)
                self.offset += -(-nbytes // self.ALIGN) * self.ALIGN
                return view
            self.slab, self.offset = self.slab + 1, 0
        size = max(self.slab_bytes, nbytes)
        self.slabs.append(torch.empty(size, dtype=torch.uint8, pin_memory=self.pinned))
        return self.take(shape)

    def reset(self) -> None:
        self.slab, self.offset = 0, 0

    @property
    def held_bytes(self) -> int:
        return sum(s.numel() for s in self.slabs)


class Mover:
    """Moves plane rows between the device pools and host memory, one bounded chunk at a time (SGLang's
    offload chunk, ``rules.CPU_OFFLOAD_CHUNK_SOURCE``)."""

    def __init__(self, device: torch.device, chunk: int = rules.CPU_OFFLOAD_CHUNK) -> None:
        self.device = device
        self.chunk = chunk
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if self.cuda else None
        self.arena = HostArena(pinned=self.cuda)

    @contextlib.contextmanager
    def _side_stream(self) -> Iterator[None]:
        """Run a whole copy on the side stream: after what the main stream queued, done on return."""
        if self.stream is None:
            yield
            return
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            yield
        self.stream.synchronize()  # SGLang synchronizes too: the copy is complete when the call returns

    def _to_host(self, plane: Plane, units: torch.Tensor) -> torch.Tensor:
        host = self.arena.take((plane.layers, units.numel(), plane.unit_bytes))
        if self.stream is None:
            runs = contiguous_runs(units)
            if runs is not None:  # whole runs of slots: plain strided memcpy per run
                for dst, src, length in runs:
                    host[:, dst : dst + length].copy_(plane.data[:, src : src + length])
            else:
                torch.index_select(widened(plane.data), 1, units, out=widened(host))
            return host
        staged = plane.data.index_select(1, units)  # one chunk of every layer, bounded by the chunk
        host.copy_(staged, non_blocking=True)
        return host

    def _from_host(self, plane: Plane, units: torch.Tensor, host: torch.Tensor) -> None:
        if self.stream is None:
            runs = contiguous_runs(units)
            if runs is not None:
                for src, dst, length in runs:
                    plane.data[:, dst : dst + length].copy_(host[:, src : src + length])
            else:
                widened(plane.data).index_copy_(1, units, widened(host))
            return
        staged = host.to(self.device, non_blocking=True)
        plane.data.index_copy_(1, units, staged)

    def offload(self, planes: list[Plane], slots: torch.Tensor) -> HostChunks:
        chunks: HostChunks = []
        with self._side_stream():
            for start in range(0, slots.numel(), self.chunk):
                part = slots[start : start + self.chunk]
                chunks.append({p.name: self._to_host(p, p.units_of(part)) for p in planes})
        return chunks

    def restore(self, chunks: HostChunks, planes: list[Plane], slots: torch.Tensor) -> None:
        by_name = {p.name: p for p in planes}
        rows = [chunk_rows(chunk, by_name) for chunk in chunks]
        if sum(rows) != slots.numel():  # load_cpu_copy asserts the same, chunk by chunk
            raise RuntimeError(f"restore: {sum(rows)} rows saved, {slots.numel()} slots allocated")
        start = 0
        with self._side_stream():
            for chunk, count in zip(chunks, rows, strict=True):
                part = slots[start : start + count]
                for name, host in chunk.items():
                    plane = by_name[name]
                    self._from_host(plane, plane.units_of(part), host)
                start += count


MIN_RUN = 16  # mean run length below which one indexed gather beats a loop of slice copies


def contiguous_runs(units: torch.Tensor) -> list[tuple[int, int, int]] | None:
    """(position, first unit, length) of each run of consecutive units; None when too fragmented.

    Allocators hand a request whole pages in order, so its slots are mostly long runs, and a run
    copies at memcpy speed where an indexed gather or scatter walks element by element.
    """
    n = units.numel()
    if n == 0:
        return []
    breaks = torch.nonzero(units[1:] - units[:-1] != 1).flatten().add_(1).tolist()
    if (len(breaks) + 1) * MIN_RUN > n:
        return None
    starts = [0, *breaks]
    firsts = units[starts].tolist()
    ends = [*breaks, n]
    return [(a, first, b - a) for a, first, b in zip(starts, firsts, ends, strict=True)]


def widened(t: torch.Tensor) -> torch.Tensor:
    """The same bytes viewed with the widest integer element that fits: indexing moves elements."""
    for dtype in (torch.int64, torch.int32, torch.int16):
        if t.shape[-1] % dtype.itemsize == 0 and t.data_ptr() % dtype.itemsize == 0:
            return t.view(dtype)
    return t


def chunk_rows(chunk: dict[str, torch.Tensor], planes: dict[str, Plane]) -> int:
    name, tensor = next(iter(chunk.items()))
    return tensor.shape[1] // planes[name].units_per_slot


def filter_rows(chunks: HostChunks, planes: list[Plane], keep: torch.Tensor, chunk: int) -> HostChunks:
    """``_filter_swa_cpu_copy``: keep the saved rows KEEP selects, re-chunked (swa_memory_pool.py:338-366)."""
    by_name = {p.name: p for p in planes}
    if not chunks or bool(keep.all()):
        return chunks
    merged: dict[str, torch.Tensor] = {}
    for name in chunks[0]:
        joined = torch.cat([c[name] for c in chunks], dim=1)
        per = by_name[name].units_per_slot
        rows = joined.view(joined.shape[0], -1, per, joined.shape[2])[:, keep.cpu()]
        merged[name] = rows.reshape(joined.shape[0], -1, joined.shape[2])
    total = int(keep.sum())
    out: HostChunks = []
    for start in range(0, total, chunk):
        out.append(
            {
                name: t[:, start * by_name[name].units_per_slot : (start + chunk) * by_name[name].units_per_slot]
                for name, t in merged.items()
            }
        )
    return out


SlotPolicy = Callable[[list[Plane], HostChunks, torch.Tensor], tuple[HostChunks, torch.Tensor]]


def exact_slots(planes: list[Plane], chunks: HostChunks, slots: torch.Tensor) -> tuple[HostChunks, torch.Tensor]:
    """Restore writes exactly the request's new slots (slot 0 never among them)."""
    return chunks, slots


@dataclass
class KVBackup:
    """What ``allocator.get_cpu_copy`` returns, whatever the pool class."""

    full: HostChunks | None = None
    swa: HostChunks | None = None
    swa_mask: torch.Tensor | None = None  # which saved full rows had SWA rows (cpu bool)
    mamba: HostChunks | None = None  # HybridLinearKVPool's second element


@dataclass
class PoolCopier:
    """The KV pool's CPU copy: its class decides what travels; POLICY may drop components."""

    pools: Pools
    mover: Mover
    ledger: CopyLedger
    policy: CopyPolicy
    carries_mamba: bool  # what the pool's copy really does (HybridLinearKVPool: True)
    restore_slots: SlotPolicy = field(default_factory=lambda: exact_slots)

    def _out(self, planes: list[Plane], slots: torch.Tensor, rid: int) -> HostChunks:
        chunks = self.mover.offload(planes, slots)
        self.ledger.record_chunks(chunks, planes, "out", rid)
        return chunks

    def _in(self, chunks: HostChunks, planes: list[Plane], slots: torch.Tensor, rid: int) -> None:
        self.ledger.record_chunks(chunks, planes, "in", rid)
        if chunks and planes:
            chunks, slots = self.restore_slots(planes, chunks, slots)
        self.mover.restore(chunks, planes, slots)

    def get_cpu_copy(self, slots: torch.Tensor, mamba_slot: int | None, rid: int) -> KVBackup:
        pools, backup = self.pools, KVBackup()
        if pools.full is not None:
            backup.full = self._out(self.policy.carried(pools.full.planes), slots, rid)
        if pools.swa is not None and pools.full_to_swa is not None:
            swa_slots = pools.full_to_swa[slots]
            mask = swa_slots > 0
            planes = self.policy.carried(pools.swa.planes)
            if bool(mask.any()) and planes:
                backup.swa = self._out(planes, swa_slots[mask], rid)
                backup.swa_mask = mask.cpu()
        if self.carries_mamba and pools.mamba is not None and mamba_slot is not None:
            backup.mamba = self._out(pools.mamba.planes, _one(mamba_slot, pools), rid)
        return backup

    def load_kv(self, backup: KVBackup, slots: torch.Tensor, rid: int) -> None:
        """Full KV first, then the SWA rows mapped both when saved and now (swa_memory_pool.py:394-430)."""
        pools = self.pools
        if backup.full is not None and pools.full is not None:
            self._in(backup.full, self.policy.carried(pools.full.planes), slots, rid)
        if backup.swa is None or pools.swa is None or pools.full_to_swa is None:
            return
        swa_slots = pools.full_to_swa[slots]
        new_mask = swa_slots > 0
        old_mask = backup.swa_mask.to(slots.device) if backup.swa_mask is not None else new_mask
        row_mask = new_mask[old_mask]
        targets = swa_slots[old_mask][row_mask]
        if targets.numel() == 0:
            return
        planes = self.policy.carried(pools.swa.planes)
        kept = filter_rows(backup.swa, planes, row_mask, self.mover.chunk)
        self._in(kept, planes, targets, rid)

    def load_mamba(self, backup: KVBackup, mamba_slot: int | None, rid: int) -> None:
        """HybridLinearKVPool.load_cpu_copy's second half: its own mamba copy."""
        if backup.mamba is not None and self.pools.mamba is not None and mamba_slot is not None:
            self._in(backup.mamba, self.pools.mamba.planes, _one(mamba_slot, self.pools), rid)


def _one(slot: int, pools: Pools) -> torch.Tensor:
    return torch.tensor([slot], dtype=torch.int64, device=pools.device)


@dataclass
class MambaCopier:
    """``MambaPool.get_cpu_copy / load_cpu_copy`` (memory_pool.py:1208-1245): conv, then temporal."""

    pool: MambaPool
    pools: Pools
    mover: Mover
    ledger: CopyLedger

    def get_cpu_copy(self, slot: int, rid: int) -> HostChunks:
        chunks = self.mover.offload(self.pool.planes, _one(slot, self.pools))
        self.ledger.record_chunks(chunks, self.pool.planes, "out", rid)
        return chunks

    def load_cpu_copy(self, chunks: HostChunks, slot: int, rid: int) -> None:
        self.ledger.record_chunks(chunks, self.pool.planes, "in", rid)
        self.mover.restore(chunks, self.pool.planes, _one(slot, self.pools))
