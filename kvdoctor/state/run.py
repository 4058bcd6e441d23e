"""One round trip: admit requests, retract some, let intruders reuse their slots, restore, diff.

The pools are sized so the intruders must take every slot the retracted requests freed (and write
their own data there), and the restored requests land in slots they never held: a backup that
missed anything cannot be rescued by stale bytes that happened to survive. The diff checks that
last promise too (``slot_reuse``), and the allocators start shuffled, so requests hold scattered
pages and the copy engine's gather/scatter path is exercised, not only whole contiguous runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd
import torch

from kvdoctor._exceptions import InputError
from kvdoctor.core import rules
from kvdoctor.core.analysis import Analysis
from kvdoctor.core.policy import backup_carries
from kvdoctor.state import diff as diff_mod
from kvdoctor.state.budget import check_budget, retracted_for
from kvdoctor.state.faults import Fault, get_fault
from kvdoctor.state.fill import fill_background, fill_requests
from kvdoctor.state.host_copy import CopyLedger, Mover
from kvdoctor.state.pools import (
    Geometry,
    Pools,
    PoolSizes,
    Reductions,
    Request,
    admit,
    build_pools,
    check_supported,
    plan_sizes,
    pool_bytes,
    reduced_geometry,
    release,
)
from kvdoctor.state.retraction import RetractionProtocol, Session, default_protocol

Progress = Callable[[str, int, int], None]  # (what is running, steps done, steps in all)
INTRUDER_BASE = 1_000_000


@dataclass(frozen=True)
class RoundtripOptions:
    device: str = "auto"
    requests: int = 8
    tokens: int = 256
    seed: int = 0
    inject: str | None = None
    reductions: Reductions = field(default_factory=Reductions)
    retract_fraction: float = 0.5
    chunk: int = rules.CPU_OFFLOAD_CHUNK


@dataclass
class RoundtripResult:
    """The verdict, the per-component table, and what the run used."""

    ok: bool
    device: str
    kv_cache_dtype: str
    backend: str
    injected: str | None
    components: pd.DataFrame
    used: dict[str, object]
    expected_red: list[str] = field(default_factory=list)
    hazards: list[dict[str, str]] = field(default_factory=list)  # the analysis's error hazards
    elapsed_s: float = 0.0
    engine: dict[str, str | None] | None = None  # {name, version, path} when an installed server answered

    @property
    def failing(self) -> list[str]:
        return diff_mod.failing(self.components)

    @property
    def inject_matched(self) -> bool | None:
        """Did the injected fault turn exactly its own components red (None when nothing injected)?"""
        if self.injected is None:
            return None
        return set(self.failing) == set(self.expected_red)

    def to_json(self) -> dict[str, object]:
        rows = self.components.astype(object).where(self.components.notna(), None).to_dict("records")
        return {
            "ok": self.ok,
            "device": self.device,
            "kv_cache_dtype": self.kv_cache_dtype,
            "backend": self.backend,
            "injected": self.injected,
            "failing": self.failing,
            "expected_red": self.expected_red,
            "inject_matched": self.inject_matched,
            "hazards": self.hazards,
            "components": rows,
            "used": self.used,
            "elapsed_s": round(self.elapsed_s, 3),
            "engine": self.engine or {"name": "kvdoctor", "version": None, "path": None},
        }


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: no CUDA device is available (torch.cuda.is_available() is False)")
    if name not in ("cpu", "cuda"):
        raise InputError(f"--device must be auto, cpu or cuda, not '{name}'")
    return torch.device(name)


MAX_SEED = 2**64 - 1  # torch.Generator.manual_seed takes a 64-bit seed
MAX_TOKENS = 2**31 - 1  # far past any context length; the memory budget refuses far less


def _check_options(opts: RoundtripOptions) -> None:
    if opts.requests < 2:
        raise InputError("--requests must be at least 2 (some are retracted, some stay resident)")
    if not 2 <= opts.tokens <= MAX_TOKENS:
        raise InputError(f"--tokens must be in [2, {MAX_TOKENS:,}] (a retraction moves seqlen - 1 tokens)")
    if not 0 <= opts.seed <= MAX_SEED:
        raise InputError("--seed must be in [0, 2**64) (torch.Generator takes a 64-bit seed)")
    if not 0 < opts.retract_fraction < 1:
        raise InputError("the retracted fraction must be in (0, 1)")


def _backend(analysis: Analysis) -> str:
    backend = analysis.backup.backend
    if backend == "none":
        raise InputError("retraction backup backend is 'none': retracted requests are aborted, nothing round-trips")
    return backend


@dataclass
class _Run:
    """The mutable state of one run; each method is one stage of the protocol."""

    analysis: Analysis
    opts: RoundtripOptions
    pools: Pools
    protocol: RetractionProtocol
    gen: torch.Generator
    session: Session
    live: dict[int, Request] = field(default_factory=dict)
    before: dict[int, dict[str, diff_mod.Capture]] = field(default_factory=dict)
    at_visible: dict[int, dict[str, diff_mod.Capture]] = field(default_factory=dict)

    def admit_and_fill(self, seqlens: dict[int, int]) -> None:
        reqs = [admit(self.pools, rid, n) for rid, n in seqlens.items()]
        fill_requests(self.pools, reqs, self.gen, self.analysis.spec.kv_dtype)
        for req in reqs:
            self.live[req.rid] = req
            self.before[req.rid] = diff_mod.capture_request(self.pools, req)

    def on_visible(self, req: Request) -> None:
        self.at_visible[req.rid] = diff_mod.capture_request(self.pools, req)


def admit_intruders(run: _Run, seqlens: dict[int, int], retracted: list[int]) -> None:
    """New requests take (and overwrite) every slot the retracted requests freed."""
    run.admit_and_fill({INTRUDER_BASE + rid: seqlens[rid] for rid in retracted})


def error_hazards(analysis: Analysis) -> list[dict[str, str]]:
    """Launch-line errors SGLang itself would refuse; the round trip still tests the pool's copy."""
    return [
        {"severity": h.severity, "code": h.code, "message": h.message}
        for h in analysis.hazards
        if h.severity == "error"
    ]


def check_run(analysis: Analysis, options: RoundtripOptions) -> tuple[torch.device, Geometry, PoolSizes]:
    """Every refusal a run can meet (options, model, device, backend, fault, memory), before anything is
    allocated or drawn: the CLI calls it before its progress bar, so bad input is one line, not a crash."""
    _check_options(options)
    check_supported(analysis)
    device = resolve_device(options.device)
    _backend(analysis)
    if options.inject:
        get_fault(options.inject)
    geo = reduced_geometry(analysis, options.reductions)
    retract_count = retracted_for(options.requests, options.retract_fraction)
    sizing = plan_sizes(options.requests, retract_count, options.tokens, analysis.flags.page_size, geo.window)
    check_budget(analysis, geo, sizing, device, fraction=options.retract_fraction)
    return device, geo, sizing


def run_roundtrip(analysis: Analysis, options: RoundtripOptions, progress: Progress | None = None) -> RoundtripResult:
    """Run the retraction protocol on real pools and diff every component byte for byte."""
    started = time.perf_counter()
    report = progress or (lambda what, done, total: None)
    device, geo, sizing = check_run(analysis, options)
    backend = _backend(analysis)
    fault: Fault | None = get_fault(options.inject) if options.inject else None
    n, tokens, retract_count = options.requests, options.tokens, sizing.retracted

    gen = torch.Generator().manual_seed(options.seed)
    low = max(2, tokens // 2)
    seqlens = {rid: int(torch.randint(low, tokens + 1, (1,), generator=gen)) for rid in range(n)}
    retracted = sorted(int(i) for i in torch.randperm(n, generator=gen)[:retract_count])
    total = 6 + 2 * retract_count
    done = 0

    def step(what: str) -> None:
        nonlocal done
        done += 1
        report(what, done, total)

    pools = build_pools(analysis, geo, sizing, device, scatter=gen)
    if fault is not None:
        fault.check(pools, analysis.config.source)
    protocol = default_protocol(analysis.layout, backend)
    if fault is not None:
        protocol = fault.apply(protocol)
    ledger = CopyLedger()
    carries = backup_carries("host_pool", analysis.spec, analysis.layout, analysis.flags.page_size)
    session = Session(pools, Mover(device, options.chunk), ledger, frozenset(carries))
    run = _Run(analysis, options, pools, protocol, gen, session)
    run.session.on_visible = run.on_visible
    step("allocate pools")

    background_states = fill_background(pools, gen)
    padding_before = diff_mod.capture_padding(pools)
    run.admit_and_fill(seqlens)
    step("fill requests")

    backups = {}
    for rid in retracted:
        req = run.live.pop(rid)
        backups[rid] = protocol.backend.offload(protocol, run.session, req)
        release(pools, req)
        step(f"offload request {rid}")

    admit_intruders(run, seqlens, retracted)
    step("intruders reuse the freed slots")

    for rid in retracted:
        req = admit(pools, rid, seqlens[rid])
        run.live[rid] = req
        protocol.backend.restore(protocol, run.session, req, backups.pop(rid))
        step(f"restore request {rid}")
    run.session.mover.arena.reset()  # every backup is restored: its host memory may be reused

    after = {rid: diff_mod.capture_request(pools, req) for rid, req in run.live.items()}
    obs = diff_mod.Observations(
        before=run.before,
        at_visible=run.at_visible,
        after=after,
        retracted=retracted,
        residents=sorted(r for r in run.live if r not in retracted),
        padding_before=padding_before,
        padding_after=diff_mod.capture_padding(pools),
        components=_present_components(analysis, pools),
        layer_ids=_layer_ids(geo),
        free=diff_mod.capture_free(
            pools, [*run.before.values(), *run.at_visible.values(), *after.values()], background_states
        ),
    )
    frame = diff_mod.diff(obs, ledger)
    step("diff")
    present = set(frame["name"])
    result = RoundtripResult(
        ok=bool(frame["ok"].all()),
        device=str(device),
        kv_cache_dtype=analysis.spec.kv_dtype.flag,
        backend=protocol.backend.name,
        injected=options.inject,
        components=frame,
        used={
            **_used(analysis, options, sizing, pools, geo, protocol),
            "restored_into_new_slots": diff_mod.reused_slot(obs) is None,
            "max_slot_runs": _max_slot_runs(after),
        },
        expected_red=sorted(fault.expected(present)) if fault else [],
        hazards=error_hazards(analysis),
        elapsed_s=time.perf_counter() - started,
    )
    step("done")
    return result


def _max_slot_runs(after: dict[int, dict[str, diff_mod.Capture]]) -> int:
    """The most contiguous runs any live request's slots of one component fall into."""
    runs = [
        int((cap.slots.diff() != 1).sum()) + 1 for caps in after.values() for cap in caps.values() if cap.slots.numel()
    ]
    return max(runs, default=0)


def _token_index_space(pools: Pools) -> str:
    if pools.pure_swa:
        return "swa (all-SWA: identity full->SWA mapping)"
    return "full" if pools.full is not None else "none"


def _present_components(analysis: Analysis, pools: Pools) -> list[str]:
    present = {p.component for p in pools.all_planes()}
    return [name for name in analysis.spec.names if name in present]


def _layer_ids(geo: Geometry) -> dict[str, tuple[int, ...]]:
    ids: dict[str, tuple[int, ...]] = {}
    if geo.full is not None:
        for name in ("full_kv", "mla_kv", "full_kv_scales"):
            ids[name] = geo.full.layer_ids
    if geo.swa is not None:
        ids["swa_kv"] = ids["swa_kv_scales"] = geo.swa.layer_ids
    if geo.recurrent is not None:
        ids["conv_state"] = ids["temporal_state"] = geo.recurrent.layer_ids
    return ids


def _used(
    analysis: Analysis,
    opts: RoundtripOptions,
    sizing: PoolSizes,
    pools: Pools,
    geo: Geometry,
    protocol: RetractionProtocol,
) -> dict[str, object]:
    scale_layout = None
    for sub in pools.sub_pools:
        for layout in sub.scale_layouts.values():
            scale_layout = "page-interleaved (FA4, page 128)" if layout.interleaved else "flat per slot"
    return {
        "model": analysis.config.source,
        "kv_pool": analysis.layout.kv_pool,
        "token_index_space": _token_index_space(pools),
        "cpu_copy_carries_mamba": protocol.mamba.claimed,
        "caller_backs_up_mamba": analysis.layout.caller_backs_up_mamba,
        "requests": opts.requests,
        "retracted": sizing.retracted,
        "max_tokens": opts.tokens,
        "page_size": sizing.page_size,
        "seed": opts.seed,
        "reductions": opts.reductions.describe(),
        "full_layers": geo.full.layers if geo.full else 0,
        "swa_layers": geo.swa.layers if geo.swa else 0,
        "recurrent_layers": geo.recurrent.layers if geo.recurrent else 0,
        "kv_heads": geo.full.kv_heads if geo.full else (geo.swa.kv_heads if geo.swa else 0),
        "sliding_window": geo.window,
        "scale_layout": scale_layout,
        "chunk": opts.chunk,
        "pool_bytes": pool_bytes(pools),
    }
