"""``bench roundtrip --engine sglang``: SGLang's own offload/restore path as a timed path of the bench.

SGLang's configurator builds its pools for the same requests kvdoctor's bench moves (every request
``--tokens`` long), SGLang ``Req``s are admitted through its allocators, and one round is SGLang's
``backup_kv_cache(…, "cpu_tensor")`` for every request, then ``restore_kv_cache`` for every request
(back into the same slots: the copy is what is timed, not slot reuse). The byte count per round
comes from the copy ledger of one untimed round; the ledger's wrappers are removed before the
timed rounds, so what is timed is SGLang's code alone.
"""

from __future__ import annotations

from typing import Any

import torch

from kvdoctor.engines import GpuArch
from kvdoctor.engines.sglang import _pools, _runtime
from kvdoctor.engines.sglang._faults import FaultState
from kvdoctor.engines.sglang._instruments import Instruments, Patches
from kvdoctor.engines.sglang._planes import planes_of
from kvdoctor.engines.sglang.roundtrip import _admit, _Run
from kvdoctor.roundtrip.options import BenchOptions, ExtraPath
from kvdoctor.state.run import resolve_device

FILL_BLOCK = 1 << 24


def _fill(planes: list[Any], gen: torch.Generator) -> None:
    """Random bytes, tiled from one block: copy speed does not depend on content."""
    block = torch.randint(0, 256, (FILL_BLOCK,), dtype=torch.uint8, generator=gen)
    for plane in planes:
        for buf in plane.buffers:
            raw = buf.view(torch.uint8).reshape(-1)
            for start in range(0, raw.numel(), FILL_BLOCK):
                n = min(FILL_BLOCK, raw.numel() - start)
                raw[start : start + n].copy_(block[:n].to(raw.device))


def sglang_path(model: str, server_argv: list[str], opts: BenchOptions, arch: GpuArch) -> tuple[ExtraPath, dict]:
    """The timed SGLang path and what it used (pool classes, SGLang version)."""
    runtime = _runtime.resolve(model, server_argv, arch)
    device = resolve_device(opts.device)
    backup_fn, restore_fn = _runtime.retraction_functions("bench roundtrip --engine sglang")
    ctx = _runtime.import_sglang("sglang.srt.runtime_context")
    page = int(ctx.get_schedule().page_size)
    plan = _pools.PoolPlan(
        rows=opts.requests,
        pages=opts.requests * -(-opts.tokens // page),
        page_size=page,
        mamba_slots_per_request=_pools.mamba_slots_per_request(runtime),
    )
    pools = _pools.build(runtime, plan, str(device))
    planes = planes_of(pools)
    gen = torch.Generator().manual_seed(opts.seed)
    _fill(planes, gen)
    instruments = Instruments(planes)
    run = _Run(pools, planes, instruments, FaultState(), gen)
    lives = [_admit(run, rid, opts.tokens) for rid in range(opts.requests)]
    rtt, alloc = pools.req_to_token_pool, pools.allocator

    def offload() -> None:
        for live in lives:
            instruments.rid = int(live.req.rid)
            backup_fn(live.req, None, rtt, alloc, "cpu_tensor")

    def restore(_: object) -> None:
        for live in lives:
            instruments.rid = int(live.req.rid)
            restore_fn(live.req, None, rtt, alloc, "cpu_tensor")

    patches = Patches()
    instruments.install(patches, pools.sub_pools, pools.mamba_pool)
    try:
        offload()
        restore(None)
    finally:
        patches.close()
    nbytes = sum(n for _, direction, _, n in instruments.ledger.events if direction == "out")
    scaled = any(getattr(p, "k_scale_buffer", None) for p in pools.sub_pools.values())
    interpreted = _runtime.interpreter_note() if scaled else None
    used = {
        "sglang_version": runtime.info.version,
        "sglang_pool_classes": pools.classes(),
        "sglang_path": "backup_kv_cache/restore_kv_cache (cpu_tensor) on SGLang's own pools, same slots",
        "sglang_stubs": runtime.stubs,
        "sglang_notes": [n for n in (interpreted, _runtime.version_note(runtime.info)) if n],
    }
    return ExtraPath("sglang", offload, restore, nbytes), used
