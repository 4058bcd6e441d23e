"""`kvdoctor bench roundtrip`: retraction offload/restore bandwidth, ours vs the server's copy.

Both paths move the same requests' bytes out of the same pools in the same run. "naive" is the
way SGLang's ``get_cpu_copy`` / ``load_cpu_copy`` do it today: per layer, per 8192-slot chunk,
``buffer[layer][idx].cpu()`` into a fresh host tensor (and ``buffer[layer][idx] = host.to(dev)``
back). "ours" is ``kvdoctor.state``'s engine: every layer of a chunk in one gather, into reused
(pinned on CUDA) host memory, on a side stream. On CUDA the pinned host<->device copy bandwidth
is measured too, as the ceiling both paths are judged against.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import torch

from kvdoctor.bench.timing import time_call
from kvdoctor.core.sglang import rules
from kvdoctor.core.sglang.analysis import Analysis
from kvdoctor.core.sglang.policy import backup_carries
from kvdoctor.roundtrip.options import BenchOptions, ExtraPath
from kvdoctor.roundtrip.steps import Progress
from kvdoctor.state.host_copy import CopyLedger, Mover
from kvdoctor.state.pools import (
    Plane,
    Pools,
    Request,
    admit,
    build_pools,
    plan_sizes,
    reduced_geometry,
    token_slots,
)
from kvdoctor.state.retraction import RetractionBackup, Session, default_protocol
from kvdoctor.state.run import resolve_device

FILL_BLOCK = 16 << 20
PINNED_PROBE_BYTES = 1 << 30


@dataclass(frozen=True)
class BenchRow:
    path: str  # ours | naive | pinned-memcpy
    direction: str  # offload (device -> host) | restore (host -> device)
    bytes: int
    median_s: float
    min_s: float
    gbps: float  # at the median time
    best_gbps: float  # at the fastest sample: steadier than the median on a shared machine
    vs_naive: float | None = None  # ours / naive, same direction, best-of-N times
    vs_pinned: float | None = None  # fraction of the measured pinned copy bandwidth (CUDA)


@dataclass
class BenchResult:
    device: str
    model: str
    kv_cache_dtype: str
    requests: int
    tokens: int
    bytes_per_round: int
    bytes_match: bool
    rows: list[BenchRow]
    used: dict[str, object]
    versus: dict[str, dict[str, float]] = field(default_factory=dict)  # ours / other path, best GB/s

    def ratio(self, direction: str) -> float | None:
        return next((r.vs_naive for r in self.rows if r.path == "ours" and r.direction == direction), None)

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        data["offload_speedup"] = self.ratio("offload")
        data["restore_speedup"] = self.ratio("restore")
        return data


def _fill_cheaply(pools: Pools, seed: int) -> None:
    """Random bytes, tiled: the copy speed does not depend on content, the byte check does."""
    gen = torch.Generator().manual_seed(seed)
    block = torch.randint(0, 256, (FILL_BLOCK,), dtype=torch.uint8, generator=gen).to(pools.device)
    for plane in pools.all_planes():
        flat = plane.data.view(-1)
        for start in range(0, flat.numel(), FILL_BLOCK):
            part = flat[start : start + FILL_BLOCK]
            part.copy_(block[: part.numel()])


# --- the server's copy, restated: per layer, per chunk, one fresh host tensor per buffer ---

NaiveBackup = dict[str, list[list[torch.Tensor]]]  # plane key -> layer -> chunk


def _naive_view(plane: Plane, layer: int, heads: int) -> torch.Tensor:
    data = plane.data[layer]
    if plane.units_per_slot == 1 and plane.unit_bytes % heads == 0:
        return data.view(data.shape[0], heads, -1)  # (rows, heads, bytes per head), as the pool
    return data  # (units, bytes per unit): a page-interleaved scale plane's scattered units


def _naive_out(planes: list[Plane], slots: torch.Tensor, heads: int, key: str, out: NaiveBackup) -> None:
    for plane in planes:
        layers: list[list[torch.Tensor]] = []
        for layer in range(plane.layers):
            view = _naive_view(plane, layer, heads)
            chunks = []
            for start in range(0, slots.numel(), rules.CPU_OFFLOAD_CHUNK):
                units = plane.units_of(slots[start : start + rules.CPU_OFFLOAD_CHUNK])
                chunks.append(view[units].to("cpu", non_blocking=True))
            layers.append(chunks)
        out[f"{key}.{plane.name}"] = layers


def _naive_in(planes: list[Plane], slots: torch.Tensor, heads: int, key: str, saved: NaiveBackup) -> None:
    for plane in planes:
        for layer, chunks in enumerate(saved[f"{key}.{plane.name}"]):
            view = _naive_view(plane, layer, heads)
            for i, host in enumerate(chunks):
                start = i * rules.CPU_OFFLOAD_CHUNK
                units = plane.units_of(slots[start : start + rules.CPU_OFFLOAD_CHUNK])
                view[units] = host.to(view.device, non_blocking=True)


def _naive_targets(pools: Pools, req: Request) -> list[tuple[str, list[Plane], torch.Tensor, int]]:
    slots = token_slots(pools, req)
    targets = []
    if pools.full is not None:
        targets.append(("full", pools.full.planes, slots, pools.full.geometry.kv_heads))
    if pools.swa is not None and pools.full_to_swa is not None:
        mapped = pools.full_to_swa[slots]
        targets.append(("swa", pools.swa.planes, mapped[mapped > 0], pools.swa.geometry.kv_heads))
    return targets


def naive_offload(pools: Pools, req: Request) -> NaiveBackup:
    out: NaiveBackup = {}
    for key, planes, slots, heads in _naive_targets(pools, req):
        _naive_out(planes, slots, heads, key, out)
    if pools.mamba is not None and req.mamba_slot is not None:
        idx = torch.tensor([req.mamba_slot], device=pools.device)
        for plane in pools.mamba.planes:  # MambaPool already copies all layers at once
            out[f"mamba.{plane.name}"] = [[plane.data[:, idx].to("cpu", non_blocking=True)]]
    _sync(pools.device)
    return out


def naive_restore(pools: Pools, req: Request, saved: NaiveBackup) -> None:
    for key, planes, slots, heads in _naive_targets(pools, req):
        _naive_in(planes, slots, heads, key, saved)
    if pools.mamba is not None and req.mamba_slot is not None:
        idx = torch.tensor([req.mamba_slot], device=pools.device)
        for plane in pools.mamba.planes:
            plane.data[:, idx] = saved[f"mamba.{plane.name}"][0][0].to(pools.device, non_blocking=True)
    _sync(pools.device)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --- timing both paths, each as offload-all then restore-all rounds ---


@dataclass
class _Path:
    """One copy path under test: offload every request, restore every request, clean up."""

    offload: Callable[[], object]
    restore: Callable[[object], None]
    after: Callable[[], None] = lambda: None
    samples: tuple[list[float], list[float]] = field(default_factory=lambda: ([], []))

    def round(self, keep: bool) -> None:
        start = time.perf_counter()
        saved = self.offload()
        mid = time.perf_counter()
        self.restore(saved)
        end = time.perf_counter()
        del saved
        self.after()
        if keep:
            self.samples[0].append(mid - start)
            self.samples[1].append(end - mid)


def _interleaved(paths: list[_Path], opts: BenchOptions, report: Progress) -> None:
    """Alternate the paths round by round, so a burst of load on a shared machine hits both."""
    rounds = opts.warmup + opts.repeats
    for i in range(rounds):
        what = "warm-up round" if i < opts.warmup else f"timed round {i - opts.warmup + 1} of {opts.repeats}"
        report(what, 1 + i, 1 + rounds)
        for path in paths:
            path.round(keep=i >= opts.warmup)


def _row(path: str, direction: str, nbytes: int, samples: list[float]) -> BenchRow:
    median = statistics.median(samples)
    return BenchRow(path, direction, nbytes, median, min(samples), nbytes / median / 1e9, nbytes / min(samples) / 1e9)


def _bytes_match(pools: Pools, session: Session, proto, reqs: list[Request]) -> bool:
    """Our backup and the naive one hold the same bytes (first and last request)."""
    for req in {reqs[0].rid: reqs[0], reqs[-1].rid: reqs[-1]}.values():
        ours = proto.backend.offload(proto, session, req)
        theirs = naive_offload(pools, req)
        if _flatten_ours(ours) != _flatten_naive(theirs):
            return False
    session.mover.arena.reset()
    return True


def _flatten_ours(backup: RetractionBackup) -> dict[str, bytes]:
    out: dict[str, list[torch.Tensor]] = {}
    parts = (("full", backup.kv.full), ("swa", backup.kv.swa), ("mamba", backup.kv.mamba), ("mamba", backup.mamba_cpu))
    for key, chunks in parts:
        for chunk in chunks or []:
            for name, t in chunk.items():
                for layer in range(t.shape[0]):
                    out.setdefault(f"{key}.{name}.{layer}", []).append(t[layer].reshape(-1))
    return {k: torch.cat(v).numpy().tobytes() for k, v in out.items()}


def _flatten_naive(backup: NaiveBackup) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for key, layers in backup.items():
        if key.startswith("mamba."):
            t = layers[0][0]
            for layer in range(t.shape[0]):
                out[f"{key}.{layer}"] = t[layer].reshape(-1).numpy().tobytes()
            continue
        for layer, chunks in enumerate(layers):
            out[f"{key}.{layer}"] = torch.cat([c.reshape(-1) for c in chunks]).numpy().tobytes()
    return out


def _pinned_rows(device: torch.device, nbytes: int, opts: BenchOptions) -> list[BenchRow]:
    size = min(nbytes, PINNED_PROBE_BYTES)
    host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(size, dtype=torch.uint8, device=device)
    h2d = time_call(lambda: dev.copy_(host, non_blocking=True), device=device, repeats=max(3, opts.repeats))
    d2h = time_call(lambda: host.copy_(dev, non_blocking=True), device=device, repeats=max(3, opts.repeats))
    return [
        BenchRow(
            "pinned-memcpy", "offload", size, d2h.median_s, d2h.min_s, size / d2h.median_s / 1e9, size / d2h.min_s / 1e9
        ),
        BenchRow(
            "pinned-memcpy", "restore", size, h2d.median_s, h2d.min_s, size / h2d.median_s / 1e9, size / h2d.min_s / 1e9
        ),
    ]


def bench_roundtrip(
    analysis: Analysis, opts: BenchOptions, extra: Sequence[ExtraPath] = (), progress: Progress | None = None
) -> BenchResult:
    """Offload and restore every request, every path, in one run; report bandwidths and ratios.

    PROGRESS, when given, is told each stage as it starts: building the pools, then every round.
    """
    report = progress or (lambda what, done, total: None)
    report("allocate and fill the pools", 0, 1 + opts.warmup + opts.repeats)
    device = resolve_device(opts.device)
    geo = reduced_geometry(analysis, opts.reductions)
    sizing = plan_sizes(opts.requests, 0, opts.tokens, analysis.flags.page_size, geo.window)
    pools = build_pools(analysis, geo, sizing, device)
    _fill_cheaply(pools, opts.seed)
    reqs = [admit(pools, rid, opts.tokens) for rid in range(opts.requests)]
    proto = default_protocol(analysis.layout, "cpu_tensor")
    carries = frozenset(backup_carries("host_pool", analysis.spec, analysis.layout, analysis.flags.page_size))
    session = Session(pools, Mover(device), CopyLedger(), carries)
    match = _bytes_match(pools, session, proto, reqs)

    def ours_out() -> list[RetractionBackup]:
        session.ledger.events.clear()
        return [proto.backend.offload(proto, session, r) for r in reqs]

    def ours_in(saved: object) -> None:
        for req, backup in zip(reqs, saved, strict=True):  # type: ignore[call-overload]
            proto.backend.restore(proto, session, req, backup)

    nbytes = sum(n for _, direction, _, n in _ledger_round(session, ours_out, ours_in) if direction == "out")
    ours = _Path(ours_out, ours_in, session.mover.arena.reset)
    naive = _Path(
        lambda: [naive_offload(pools, r) for r in reqs],
        lambda saved: [naive_restore(pools, r, s) for r, s in zip(reqs, saved, strict=True)],  # type: ignore[call-overload]
    )
    others = [(x, _Path(x.offload, x.restore)) for x in extra]
    _interleaved([ours, naive, *(p for _, p in others)], opts, report)
    rows = []
    versus: dict[str, dict[str, float]] = {x.name: {} for x in extra}
    for i, direction in enumerate(("offload", "restore")):
        mine = _row("ours", direction, nbytes, ours.samples[i])
        theirs = _row("naive", direction, nbytes, naive.samples[i])
        rows += [BenchRow(**{**asdict(mine), "vs_naive": mine.best_gbps / theirs.best_gbps}), theirs]
        for x, path in others:
            row = _row(x.name, direction, x.nbytes, path.samples[i])
            rows.append(BenchRow(**{**asdict(row), "vs_naive": row.best_gbps / theirs.best_gbps}))
            versus[x.name][direction] = mine.best_gbps / row.best_gbps
    if device.type == "cuda":
        pinned = _pinned_rows(device, nbytes, opts)
        ceiling = {r.direction: r.gbps for r in pinned}
        rows = [BenchRow(**{**asdict(r), "vs_pinned": r.best_gbps / ceiling[r.direction]}) for r in rows] + pinned
    return BenchResult(
        device=str(device),
        model=analysis.config.source,
        kv_cache_dtype=analysis.spec.kv_dtype.flag,
        requests=opts.requests,
        tokens=opts.tokens,
        bytes_per_round=nbytes,
        bytes_match=match,
        rows=rows,
        versus=versus,
        used={
            "reductions": opts.reductions.describe(),
            "page_size": sizing.page_size,
            "repeats": opts.repeats,
            "kv_pool": analysis.layout.kv_pool,
            "host_arena_bytes": session.mover.arena.held_bytes,
        },
    )


def _ledger_round(session: Session, out: Callable[[], object], back: Callable[[object], None]):
    """One untimed round that also tells how many bytes a round moves (from the ledger)."""
    saved = out()
    back(saved)
    session.mover.arena.reset()
    return list(session.ledger.events)
