"""Fill pools with seeded data the way a server would: quantized KV through the codec, real states.

The untouched background (free slots, the padding slot) gets random bytes too, so a restore that
leaves one of its own slots alone shows as a mismatch rather than as stale zeros agreeing by
chance, and a write into a slot no request ever held shows as well: the background is drawn
plane by plane from a saved generator state, so the diff can redraw it at the end and compare
every never-held slot (``diff.capture_free``) without keeping a copy of the pools.
"""

from __future__ import annotations

import torch

from kvdoctor import mxfp8
from kvdoctor.core.sglang.spec import KVDtype
from kvdoctor.state.pools import KVSubPool, Plane, Pools, Request, token_slots

# The fp8 element each plain-fp8 --kv-cache-dtype stores as bytes (anything else: e4m3fn).
FP8_ELEMENT = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def _random_bytes(shape: tuple[int, ...], gen: torch.Generator, device: torch.device) -> torch.Tensor:
    return torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen).to(device)


def fill_background(pools: Pools, gen: torch.Generator) -> list[torch.Tensor]:
    """Random bytes everywhere, slot 0 included; returns GEN's state before each plane (``background``)."""
    states = []
    for plane in pools.all_planes():
        states.append(gen.get_state())
        plane.data.copy_(_random_bytes(tuple(plane.data.shape), gen, pools.device))
    return states


def background(plane: Plane, state: torch.Tensor) -> torch.Tensor:
    """The bytes ``fill_background`` wrote into PLANE, redrawn on the host from its saved STATE."""
    gen = torch.Generator()
    gen.set_state(state)
    return _random_bytes(tuple(plane.data.shape), gen, torch.device("cpu"))


def _values(shape: tuple[int, ...], gen: torch.Generator, device: torch.device) -> torch.Tensor:
    return torch.randn(shape, generator=gen, dtype=torch.float32).to(device)


def _kv_slots(pools: Pools, reqs: list[Request], sub: KVSubPool) -> torch.Tensor:
    slots = torch.cat([token_slots(pools, r) for r in reqs])
    if sub.label == "full" or pools.full_to_swa is None:
        return slots
    swa = pools.full_to_swa[slots]
    return swa[swa > 0]


def _fill_plain(sub: KVSubPool, kv: KVDtype, loc: torch.Tensor, gen: torch.Generator) -> None:
    for plane in sub.payload_planes:
        typed = sub.typed(plane) if sub.element_dtype != torch.uint8 else None
        n, width = loc.numel(), plane.unit_bytes
        if typed is not None:
            values = _values((plane.layers, n, typed.shape[2], typed.shape[3]), gen, loc.device)
            rows = values.to(sub.element_dtype).view(torch.uint8).reshape(plane.layers, n, width)
        else:
            fp8 = FP8_ELEMENT.get(kv.flag, torch.float8_e4m3fn)
            rows = _values((plane.layers, n, width), gen, loc.device).to(fp8).view(torch.uint8)
        plane.data.index_copy_(1, loc, rows)


def _fill_mxfp8(sub: KVSubPool, loc: torch.Tensor, gen: torch.Generator) -> None:
    """Quantize through the codec and store the way the pool's layout wants (flat or interleaved)."""
    planes = {p.name: p for p in sub.planes}
    n = loc.numel()
    for name, (heads, dim) in zip(("k", "v"), sub.geometry.shapes, strict=True):
        payload, scales, layout = planes[name], planes[f"{name}_scale"], sub.scale_layouts[f"{name}_scale"]
        for layer in range(payload.layers):
            x = _values((n, heads, dim), gen, loc.device).to(torch.bfloat16)
            if layout.interleaved:
                mxfp8.quantize_scatter(
                    x,
                    loc,
                    payload.data[layer].view(sub.rows, heads, dim),
                    scales.data[layer].view(-1),
                    page_size=sub.page_size,
                )
            else:
                q = mxfp8.quantize(x)
                payload.data[layer].index_copy_(0, loc, q.payload.view(torch.uint8).reshape(n, heads * dim))
                scales.data[layer].index_copy_(0, loc, q.scales.reshape(n, heads * layout.sf))


def fill_requests(pools: Pools, reqs: list[Request], gen: torch.Generator, kv: KVDtype) -> None:
    """Write KV for each request's ``seqlen - 1`` tokens and a recurrent state into its mamba slot."""
    if not reqs:
        return
    for sub in pools.sub_pools:
        loc = _kv_slots(pools, reqs, sub)
        if loc.numel() == 0:
            continue
        if sub.scale_planes:
            _fill_mxfp8(sub, loc, gen)
        else:
            _fill_plain(sub, kv, loc, gen)
    if pools.mamba is None:
        return
    slots = torch.tensor([r.mamba_slot for r in reqs], dtype=torch.int64, device=pools.device)
    for plane in pools.mamba.planes:
        dtype = pools.mamba.dtypes[plane.name]
        count = plane.unit_bytes // dtype.itemsize
        values = _values((plane.layers, len(reqs), count), gen, pools.device).to(dtype).view(torch.uint8)
        plane.data.index_copy_(1, slots, values)
