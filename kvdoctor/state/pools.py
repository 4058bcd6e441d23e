"""Device pools shaped by a ``StateSpec``: KV sub-pools, MXFP8 scale planes, the MambaPool, allocators.

Every buffer is held as bytes (``uint8``) with its element dtype remembered beside it, because a
retraction moves bytes, and the diff judges bytes: a NaN payload or an e8m0 scale must come back
bit for bit, not "equal as numbers". Each buffer is wrapped in a ``Plane`` that knows how to turn a
set of slots into the units it stores (a slot row, or the scattered bytes of an interleaved scale
page), so one copy engine moves payload, scales and recurrent state alike.

Sizes are chosen so that the protocol cannot dodge reuse: the pools hold exactly the live
requests, the intruders that reuse a retracted request's slots, and the restored requests.

An all-SWA model (every layer sliding, no full-attention pool) gets SGLang's
``PureSWATokenToKVPoolAllocator`` shape (allocator/swa.py:727-770): one allocator whose token
slots *are* SWA slots, and an identity full->SWA mapping over ``size_swa + page_size`` rows, so
each request still owns its own token index space.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from kvdoctor._exceptions import InputError
from kvdoctor.core.sglang import rules
from kvdoctor.core.sglang.analysis import Analysis
from kvdoctor.core.sglang.geometry import AttentionGeometry, RecurrentGeometry
from kvdoctor.core.sglang.policy import PoolLayout
from kvdoctor.mxfp8 import scale_offsets
from kvdoctor.roundtrip.options import Reductions

PADDING_SLOT = 0
TORCH_DTYPES = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
    "uint8": torch.uint8,
}
FP8_STORE_DTYPES = frozenset({"float8_e4m3fn", "float8_e5m2"})  # held as bytes: a codec writes them


@dataclass(frozen=True)
class Geometry:
    """The (possibly reduced) geometry the pools are built from."""

    full: AttentionGeometry | None
    swa: AttentionGeometry | None
    recurrent: RecurrentGeometry | None
    window: int | None


def _reduce_attention(geo: AttentionGeometry | None, red: Reductions) -> AttentionGeometry | None:
    if geo is None or not geo.layers:
        return None
    ids = geo.layer_ids[: red.layers] if red.layers else geo.layer_ids
    heads = min(geo.kv_heads, red.heads) if red.heads and not geo.mla else geo.kv_heads
    return dataclasses.replace(geo, layer_ids=ids, kv_heads=heads)


def _reduce_recurrent(rec: RecurrentGeometry | None, red: Reductions) -> RecurrentGeometry | None:
    if rec is None or not rec.layers:
        return None
    ids = rec.layer_ids[: red.layers] if red.layers else rec.layer_ids
    temporal = rec.temporal_shape
    if red.heads and math.prod(temporal):
        temporal = (min(temporal[0], red.heads), *temporal[1:])
    return dataclasses.replace(rec, layer_ids=ids, temporal_shape=temporal)


def reduced_geometry(analysis: Analysis, red: Reductions) -> Geometry:
    spec = analysis.spec
    return Geometry(
        full=_reduce_attention(spec.full, red),
        swa=_reduce_attention(spec.swa, red),
        recurrent=_reduce_recurrent(spec.recurrent, red),
        window=spec.sliding_window,
    )


@dataclass
class Plane:
    """One byte buffer ``(layers, units, unit_bytes)`` and the map from slots to its units."""

    component: str  # the StateSpec component these bytes belong to
    name: str  # k, v, k_scale, v_scale, kv, conv0, temporal …
    data: torch.Tensor
    units_of: Callable[[torch.Tensor], torch.Tensor]
    units_per_slot: int = 1

    @property
    def layers(self) -> int:
        return self.data.shape[0]

    @property
    def unit_bytes(self) -> int:
        return self.data.shape[2]


def _rows(slots: torch.Tensor) -> torch.Tensor:
    return slots


@dataclass
class ScaleLayout:
    """Where an MXFP8 sub-pool keeps a slot's E8M0 bytes (memory_pool.py:3921-3946)."""

    heads: int
    sf: int  # scale bytes per head: head_dim // block
    page_size: int
    block: int  # elements per E8M0 scale (core.rules.KV_DTYPES[flag].scale_block)

    @property
    def interleaved(self) -> bool:
        return self.page_size == rules.MXFP8_INTERLEAVED_PAGE

    def units(self, slots: torch.Tensor) -> torch.Tensor:
        """The (slot, head) groups of SF scale bytes of SLOTS, slot-major, in the interleaved plane.

        A slot's SF scales for one head are contiguous in the FA4 layout (offset ... + j), so the
        plane is addressed in SF-byte units: unit = offset of scale 0 // SF.
        """
        offsets = scale_offsets(slots, self.heads, self.sf * self.block, self.page_size)
        return (offsets[..., 0] // self.sf).reshape(-1)


@dataclass
class KVSubPool:
    """A token-indexed KV pool (the full one, or the sliding-window one) of one pool class."""

    label: str  # "full" or "swa"
    pool_class: str
    geometry: AttentionGeometry
    element_dtype: torch.dtype
    rows: int  # size + page_size, as SGLang allocates
    page_size: int
    planes: list[Plane]
    scale_layouts: dict[str, ScaleLayout]

    @property
    def payload_planes(self) -> list[Plane]:
        return [p for p in self.planes if not p.name.endswith("_scale")]

    @property
    def scale_planes(self) -> list[Plane]:
        return [p for p in self.planes if p.name.endswith("_scale")]

    def typed(self, plane: Plane) -> torch.Tensor:
        """The payload plane as (layers, rows, heads, head_dim) of its element dtype."""
        width = plane.unit_bytes // self.element_dtype.itemsize
        heads = 1 if self.geometry.mla else self.geometry.kv_heads
        return plane.data.view(self.element_dtype).view(plane.layers, self.rows, heads, width // heads)


@dataclass
class MambaPool:
    """Request-indexed recurrent state: one byte plane per conv shape, one for the temporal state."""

    geometry: RecurrentGeometry
    slots: int  # size + 1: slot 0 is the padding sink (allocator/mamba.py:84-88)
    planes: list[Plane]
    dtypes: dict[str, torch.dtype]


class PageAllocator:
    """Hands out pages; a freed page goes to the FRONT, so the next request reuses it at once.

    Page 0 holds the padding slot and is never handed out (SGLang's allocators start at 1). With a
    generator the free list starts shuffled, like a server's after some churn, so a request's
    pages — and its slots — are scattered rather than one contiguous run.
    """

    def __init__(self, pages: int, scatter: torch.Generator | None = None) -> None:
        order = torch.randperm(pages, generator=scatter) + 1 if scatter is not None else range(1, pages + 1)
        self.free_pages: list[int] = [int(p) for p in order]

    def alloc(self, count: int) -> list[int]:
        if count > len(self.free_pages):
            raise RuntimeError(f"pool exhausted: asked for {count} pages, {len(self.free_pages)} free")
        taken, self.free_pages = self.free_pages[:count], self.free_pages[count:]
        return taken

    def free(self, pages: list[int]) -> None:
        self.free_pages = list(pages) + self.free_pages


@dataclass
class Pools:
    """Every pool one server holds for the modelled state, on one device."""

    device: torch.device
    layout: PoolLayout
    kv_dtype_flag: str
    page_size: int
    full: KVSubPool | None
    swa: KVSubPool | None
    mamba: MambaPool | None
    full_to_swa: torch.Tensor | None  # (token rows,) int64; 0 = not mapped (out of window)
    req_to_token: torch.Tensor  # (requests + 1, max tokens) int64; row 0 is padding
    full_alloc: PageAllocator  # the token allocator (for an all-SWA model, the SWA allocator itself)
    swa_alloc: PageAllocator | None  # a separate SWA allocator: hybrid models with a full pool only
    mamba_alloc: PageAllocator | None  # "pages" of one slot
    req_alloc: PageAllocator
    window: int | None

    @property
    def pure_swa(self) -> bool:
        """Every attention layer slides: token slots are SWA slots (PureSWATokenToKVPoolAllocator)."""
        return self.full is None and self.swa is not None

    @property
    def sub_pools(self) -> list[KVSubPool]:
        return [p for p in (self.full, self.swa) if p is not None]

    def all_planes(self) -> list[Plane]:
        planes = [pl for sub in self.sub_pools for pl in sub.planes]
        return planes + (self.mamba.planes if self.mamba else [])


def storage_dtype(store_dtype: str) -> torch.dtype:
    """The element dtype of a KV buffer, from core's ``KVDtype.store_dtype`` (a torch dtype name).

    fp8 payloads are held as bytes: SGLang stores plain fp8 as uint8 and MXFP8 as e4m3fn, which
    are the same bytes, and the fill writes them through a codec rather than a typed view.
    """
    if store_dtype in FP8_STORE_DTYPES:
        return torch.uint8
    if store_dtype not in TORCH_DTYPES:
        raise InputError(f"KV store dtype '{store_dtype}' is not one roundtrip models")
    return TORCH_DTYPES[store_dtype]


def _kv_sub_pool(
    label: str, pool_class: str, geo: AttentionGeometry, analysis: Analysis, size: int, page: int, device: torch.device
) -> KVSubPool:
    kv = analysis.spec.kv_dtype
    dtype = storage_dtype(kv.store_dtype)
    rows = size + page
    layers = geo.layers
    component = "mla_kv" if geo.mla else f"{label}_kv"
    planes: list[Plane] = []
    layouts: dict[str, ScaleLayout] = {}
    names = ("kv",) if geo.mla else ("k", "v")
    for name, (heads, dim) in zip(names, geo.shapes, strict=True):
        data = torch.empty((layers, rows, heads * dim * dtype.itemsize), dtype=torch.uint8, device=device)
        planes.append(Plane(component, name, data, _rows))
    if kv.block_scaled and not geo.mla:
        block = kv.scale_block
        if kv.flag not in rules.CPU_COPY_CARRIES_SCALES or block is None:
            raise InputError(f"--kv-cache-dtype {kv.flag}: roundtrip supports MXFP8 block scales only")
        for name, (heads, dim) in zip(("k", "v"), geo.shapes, strict=True):
            if dim % block:
                raise InputError(f"MXFP8 KV cache requires head_dim divisible by {block}, got {dim}")
            layout = ScaleLayout(heads, dim // block, page, block)
            if layout.interleaved:
                data = torch.empty((layers, rows * heads, layout.sf), dtype=torch.uint8, device=device)
                plane = Plane(f"{label}_kv_scales", f"{name}_scale", data, layout.units, units_per_slot=heads)
            else:
                data = torch.empty((layers, rows, heads * layout.sf), dtype=torch.uint8, device=device)
                plane = Plane(f"{label}_kv_scales", f"{name}_scale", data, _rows)
            planes.append(plane)
            layouts[f"{name}_scale"] = layout
    pool_class_name = pool_class or kv.mha_pool
    return KVSubPool(label, pool_class_name, geo, dtype, rows, page, planes, layouts)


def _mamba_pool(rec: RecurrentGeometry, slots: int, device: torch.device) -> MambaPool:
    planes: list[Plane] = []
    dtypes: dict[str, torch.dtype] = {}
    entries = [(f"conv{i}", "conv_state", s, rec.conv_dtype) for i, s in enumerate(rec.conv_shapes)]
    entries.append(("temporal", "temporal_state", rec.temporal_shape, rec.temporal_dtype))
    for name, component, shape, dtype_name in entries:
        if not math.prod(shape):
            continue
        dtype = TORCH_DTYPES[dtype_name]
        data = torch.empty((rec.layers, slots, math.prod(shape) * dtype.itemsize), dtype=torch.uint8, device=device)
        planes.append(Plane(component, name, data, _rows))
        dtypes[name] = dtype
    return MambaPool(rec, slots, planes, dtypes)


@dataclass(frozen=True)
class PoolSizes:
    """How many requests, tokens and slots the run uses (printed so the user knows)."""

    requests: int
    retracted: int
    max_tokens: int
    page_size: int
    full_pages: int
    swa_pages: int
    mamba_slots: int

    @property
    def live_requests(self) -> int:
        """Peak: the resident requests, the intruders that took the retracted slots, the restored."""
        return self.requests + self.retracted


def plan_sizes(requests: int, retracted: int, max_tokens: int, page: int, window: int | None) -> PoolSizes:
    pages_per_req = -(-max_tokens // page)
    live = requests + retracted
    swa_tokens = min(window, max_tokens) if window else max_tokens
    swa_pages_per_req = -(-swa_tokens // page) + 1  # the tail may straddle one more page
    return PoolSizes(requests, retracted, max_tokens, page, live * pages_per_req, live * swa_pages_per_req, live)


def check_supported(analysis: Analysis) -> None:
    """Refuse what roundtrip cannot model faithfully, naming the reason."""
    kv = analysis.spec.kv_dtype
    if kv.block_scaled and kv.flag not in rules.CPU_COPY_CARRIES_SCALES:
        raise InputError(
            f"--kv-cache-dtype {kv.flag}: {kv.payload_bits}-bit block-scaled pools are not modelled by "
            "roundtrip (their CPU copy leaves the block scales behind; see `kvdoctor inspect`)"
        )
    if analysis.spec.full is None and analysis.spec.swa is None and analysis.spec.recurrent is None:
        raise InputError("the model carries no per-request state to round-trip")
    if analysis.classification.is_dsv4:
        raise InputError(
            f"{analysis.layout.kv_pool} (DeepSeek-V4's own compressed-KV pool) is not modelled by roundtrip; "
            "`kvdoctor inspect` reports its pools, backup and PD state"
        )


def build_pools(
    analysis: Analysis, geo: Geometry, sizing: PoolSizes, device: torch.device, scatter: torch.Generator | None = None
) -> Pools:
    """Allocate every pool for GEO at SIZING on DEVICE (contents are filled by ``fill``).

    SCATTER, when given, shuffles every allocator's free list (see ``PageAllocator``).
    """
    check_supported(analysis)
    layout = analysis.layout
    page = sizing.page_size
    full = swa = mamba = mapping = None
    if geo.full is not None:
        full = _kv_sub_pool("full", layout.full_pool or "", geo.full, analysis, sizing.full_pages * page, page, device)
    if geo.swa is not None and full is None:  # all-SWA: one token space, identity mapping
        swa = _kv_sub_pool("swa", layout.swa_pool or "", geo.swa, analysis, sizing.full_pages * page, page, device)
        mapping = torch.arange(swa.rows, dtype=torch.int64, device=device)
    elif geo.swa is not None and full is not None:
        swa = _kv_sub_pool("swa", layout.swa_pool or "", geo.swa, analysis, sizing.swa_pages * page, page, device)
        mapping = torch.zeros(full.rows, dtype=torch.int64, device=device)
    if geo.recurrent is not None:
        mamba = _mamba_pool(geo.recurrent, sizing.mamba_slots + 1, device)
    table = torch.zeros((sizing.live_requests + 1, sizing.max_tokens), dtype=torch.int64, device=device)
    return Pools(
        device=device,
        layout=layout,
        kv_dtype_flag=analysis.spec.kv_dtype.flag,
        page_size=page,
        full=full,
        swa=swa,
        mamba=mamba,
        full_to_swa=mapping,
        req_to_token=table,
        full_alloc=PageAllocator(sizing.full_pages, scatter),
        swa_alloc=PageAllocator(sizing.swa_pages, scatter) if swa is not None and full is not None else None,
        mamba_alloc=PageAllocator(sizing.mamba_slots, scatter) if mamba is not None else None,
        req_alloc=PageAllocator(sizing.live_requests),
        window=geo.window,
    )


def pool_bytes(pools: Pools) -> int:
    return sum(p.data.numel() for p in pools.all_planes())


@dataclass
class Request:
    """One request's handles into the pools (what SGLang keeps on ``req`` and ``req.kv``)."""

    rid: int
    seqlen: int
    row: int  # req_pool_idx
    full_pages: list[int]
    swa_pages: list[int]
    mamba_slot: int | None

    @property
    def kv_tokens(self) -> int:
        """Tokens whose KV exists: the boundary token's KV is recomputed on resume (seqlen - 1)."""
        return self.seqlen - 1


def _slots(pages: list[int], positions: torch.Tensor, page: int, device: torch.device) -> torch.Tensor:
    table = torch.tensor(pages, dtype=torch.int64, device=device)
    return table[positions // page] * page + positions % page


def swa_tail_start(seqlen: int, window: int | None, page: int) -> int:
    """First position the SWA sub-pool keeps: the window's tail, page aligned (allocator/swa.py:423-426)."""
    if not window or seqlen <= window:
        return 0
    return (seqlen - window) // page * page


def admit(pools: Pools, rid: int, seqlen: int) -> Request:
    """Allocate a request row, token slots (full and, for the window tail, SWA) and a mamba slot."""
    page, device = pools.page_size, pools.device
    row = pools.req_alloc.alloc(1)[0]
    positions = torch.arange(seqlen, dtype=torch.int64, device=device)
    has_tokens = pools.full is not None or pools.pure_swa
    full_pages = pools.full_alloc.alloc(-(-seqlen // page)) if has_tokens else []
    slots = _slots(full_pages, positions, page, device) if has_tokens else positions * 0
    pools.req_to_token[row, :seqlen] = slots
    swa_pages: list[int] = []
    if pools.swa_alloc is not None and pools.full_to_swa is not None:
        start = swa_tail_start(seqlen, pools.window, page)
        swa_pages = pools.swa_alloc.alloc(-(-(seqlen - start) // page))
        pools.full_to_swa[slots[start:]] = _slots(swa_pages, positions[start:] - start, page, device)
    mamba_slot = pools.mamba_alloc.alloc(1)[0] if pools.mamba_alloc else None
    return Request(rid, seqlen, row, full_pages, swa_pages, mamba_slot)


def token_slots(pools: Pools, req: Request) -> torch.Tensor:
    """``req_to_token[req_pool_idx, :seqlen - 1]``: the slots a retraction moves."""
    return pools.req_to_token[req.row, : req.kv_tokens]


def release(pools: Pools, req: Request) -> None:
    """Free everything REQ holds; the next request to allocate gets these slots first."""
    if pools.full_to_swa is not None and pools.full is not None:
        pools.full_to_swa[pools.req_to_token[req.row, : req.seqlen]] = 0
    if pools.swa_alloc is not None:
        pools.swa_alloc.free(req.swa_pages)
    pools.full_alloc.free(req.full_pages)
    if pools.mamba_alloc is not None and req.mamba_slot is not None:
        pools.mamba_alloc.free([req.mamba_slot])
    pools.req_alloc.free([req.row])
