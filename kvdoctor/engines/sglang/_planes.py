"""The byte planes of SGLang's pools, read and written by plain indexing.

Each plane is one buffer per layer (``k_buffer[l]``, ``k_scale_buffer[l]``, ``mamba_cache.conv[i][l]``)
and the map from a slot to the bytes it owns there. The diff reads through these maps, never through
SGLang's copy functions (the code under test), so a copy that loses bytes cannot hide it.

The one layout restated here is the FA4 page-interleaved E8M0 scale buffer of
``MHATokenToKVPoolMXFP8`` (``_create_buffers``/``_read_sf_interleaved``, memory_pool.py): pages on
the leading axis, then heads, then a 32 x (page/32) chunk in which token ``off`` of a page sits at
``(off % 32) * (page / 32) + off // 32``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from kvdoctor._exceptions import EngineRefuses
from kvdoctor.engines.sglang._pools import EnginePools

MXFP8_BLOCK = 32
Reader = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (layer buffer, slots) -> (n, bytes) uint8
Writer = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]  # (layer buffer, slots, (n, bytes) uint8)


@dataclass
class StatePlane:
    """One kind of bytes in one pool: a buffer per layer and how a slot addresses it."""

    component: str  # full_kv, full_kv_scales, swa_kv, swa_kv_scales, conv_state, temporal_state
    name: str  # k, v, k_scale, v_scale, conv0, temporal
    role: str  # "full", "swa" or "mamba": which slot space indexes it
    buffers: list[torch.Tensor]
    read: Reader
    write: Writer
    slots: int  # addressable slots (rows of the buffer, in slot units)

    def capture(self, slots: torch.Tensor) -> torch.Tensor:
        """(layers, n, bytes) host copy of SLOTS' bytes in every layer."""
        if slots.numel() == 0:
            return torch.empty((len(self.buffers), 0, 0), dtype=torch.uint8)
        rows = [self.read(buf, slots).to("cpu", copy=True) for buf in self.buffers]
        return torch.stack(rows)


def _rows_read(buf: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    return buf[slots].contiguous().view(torch.uint8).reshape(slots.numel(), -1)


def _rows_write(buf: torch.Tensor, slots: torch.Tensor, values: torch.Tensor) -> None:
    flat = buf.view(torch.uint8).reshape(buf.shape[0], -1)
    flat[slots] = values.to(flat.device)


def _interleaved(page_size: int) -> tuple[Reader, Writer]:
    chunk = page_size // MXFP8_BLOCK

    def where(buf: torch.Tensor, slots: torch.Tensor) -> tuple[torch.Tensor, ...]:
        u8 = buf.view(torch.uint8).reshape(buf.shape[0], buf.shape[1], MXFP8_BLOCK * chunk, buf.shape[-1])
        slots = slots.long()
        page, off = slots // page_size, slots % page_size
        ipos = (off % MXFP8_BLOCK) * chunk + off // MXFP8_BLOCK
        heads = torch.arange(buf.shape[1], device=buf.device)
        return u8, page[:, None], heads[None, :], ipos[:, None]

    def read(buf: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        u8, page, heads, ipos = where(buf, slots)
        return u8[page, heads, ipos].reshape(slots.numel(), -1)

    def write(buf: torch.Tensor, slots: torch.Tensor, values: torch.Tensor) -> None:
        u8, page, heads, ipos = where(buf, slots)
        u8[page, heads, ipos] = values.to(u8.device).reshape(slots.numel(), buf.shape[1], buf.shape[-1])

    return read, write


def _kv_planes(role: str, pool: object, page_size: int) -> list[StatePlane]:
    if not (getattr(pool, "k_buffer", None) or getattr(pool, "kv_buffer", None)):
        return []  # a pool with no layers (a pure-Mamba model's KV pool holds no attention layer)
    if not hasattr(pool, "k_buffer") and hasattr(pool, "kv_buffer") and role == "full":
        rows = pool.kv_buffer[0].shape[0]  # MLA: one latent row (kv_lora_rank + rope dim) per token
        return [StatePlane("mla_kv", "kv", role, list(pool.kv_buffer), _rows_read, _rows_write, rows)]
    if not hasattr(pool, "k_buffer"):
        raise EngineRefuses(
            f"kvdoctor cannot read {type(pool).__name__}'s buffers yet (neither k_buffer/v_buffer nor an MLA "
            "kv_buffer: a model-specific pool); use the default engine for this model"
        )
    rows = pool.k_buffer[0].shape[0]
    planes = [
        StatePlane(f"{role}_kv", "k", role, list(pool.k_buffer), _rows_read, _rows_write, rows),
        StatePlane(f"{role}_kv", "v", role, list(pool.v_buffer), _rows_read, _rows_write, rows),
    ]
    scales = getattr(pool, "k_scale_buffer", None)
    if scales:
        if getattr(pool, "mxfp8_sf_interleaved", False):
            read, write = _interleaved(page_size)
        else:
            read, write = _rows_read, _rows_write
        for name, bufs in (("k_scale", pool.k_scale_buffer), ("v_scale", pool.v_scale_buffer)):
            planes.append(StatePlane(f"{role}_kv_scales", name, role, list(bufs), read, write, rows))
    return planes


def _mamba_planes(mamba_pool: object) -> list[StatePlane]:
    cache = mamba_pool.mamba_cache
    planes = []
    for i, conv in enumerate(cache.conv):
        if conv.numel():
            planes.append(
                StatePlane(
                    "conv_state", f"conv{i}", "mamba", list(conv.unbind(0)), _rows_read, _rows_write, conv.shape[1]
                )
            )
    temporal = cache.temporal
    if temporal is not None and temporal.numel():
        planes.append(
            StatePlane(
                "temporal_state",
                "temporal",
                "mamba",
                list(temporal.unbind(0)),
                _rows_read,
                _rows_write,
                temporal.shape[1],
            )
        )
    return planes


def planes_of(pools: EnginePools) -> list[StatePlane]:
    """Every byte plane of POOLS, full KV first, then SWA KV, then recurrent state."""
    planes: list[StatePlane] = []
    for role, pool in pools.sub_pools.items():
        planes += _kv_planes(role, pool, pools.page_size)
    if pools.mamba_pool is not None:
        planes += _mamba_planes(pools.mamba_pool)
    return planes


COMPONENT_ORDER = ("full_kv", "mla_kv", "full_kv_scales", "swa_kv", "swa_kv_scales", "conv_state", "temporal_state")


def components(planes: list[StatePlane]) -> list[str]:
    present = {p.component for p in planes}
    return [c for c in COMPONENT_ORDER if c in present]
