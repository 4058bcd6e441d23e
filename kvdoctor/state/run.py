"""One round trip: admit requests, retract some, let intruders reuse their slots, restore, diff.

The pools are sized so the intruders must take every slot the retracted requests freed (and write
their own data there), and the restored requests land in slots they never held: a backup that
missed anything cannot be rescued by stale bytes that happened to survive. The diff checks that
last promise too (``slot_reuse``), and the allocators start shuffled, so requests hold scattered
pages and the copy engine's gather/scatter path is exercised, not only whole contiguous runs.

This is kvdoctor's own engine of the round trip (torch): its steps are a
:class:`kvdoctor.roundtrip.steps.Driver`, walked by the same ``run_steps`` as the installed SGLang's; the
options, the result and its rows are the torch-free contract in :mod:`kvdoctor.roundtrip`.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

import pandas as pd
import torch

from kvdoctor._exceptions import InputError
from kvdoctor.core.registry import ERROR, Hazard
from kvdoctor.core.sglang.analysis import Analysis
from kvdoctor.core.sglang.policy import backup_carries
from kvdoctor.roundtrip.options import RoundtripOptions, check_options
from kvdoctor.roundtrip.result import ComponentCheck, ModelUsed, RoundtripResult
from kvdoctor.roundtrip.steps import INTRUDER_BASE, Progress, StepNames, nothing_held, run_steps
from kvdoctor.state import diff as diff_mod
from kvdoctor.state.budget import check_budget, retracted_for
from kvdoctor.state.faults import Fault, get_fault
from kvdoctor.state.fill import fill_background, fill_requests
from kvdoctor.state.host_copy import CopyLedger, Mover
from kvdoctor.state.pools import (
    Geometry,
    Pools,
    PoolSizes,
    Request,
    admit,
    build_pools,
    check_supported,
    plan_sizes,
    pool_bytes,
    reduced_geometry,
    release,
)
from kvdoctor.state.retraction import RetractionBackup, RetractionProtocol, Session, default_protocol

NAMES = StepNames(build="allocate pools", offload="offload request {rid}", restore="restore request {rid}")


def component_check(record: Mapping[str, object]) -> ComponentCheck:
    """A row of ``diff.diff``'s frame (numpy scalars, ``pd.NA``) as plain Python values."""
    kinds = {f.name: f.type for f in fields(ComponentCheck)}
    values = {name: _plain(record[name], str(kind)) for name, kind in kinds.items()}
    return ComponentCheck(**values)  # type: ignore[arg-type]


def _plain(value: object, kind: str) -> object:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    if kind.startswith("bool"):
        return bool(value)
    if kind.startswith("int"):
        return int(value)  # type: ignore[call-overload]
    return str(value)


def component_checks(frame: pd.DataFrame) -> list[ComponentCheck]:
    """The diff's frame as typed rows, in its order."""
    return [component_check(record) for record in frame.to_dict("records")]


def draw_requests(options: RoundtripOptions, gen: torch.Generator) -> tuple[dict[int, int], list[int]]:
    """Each request's length (half to all of ``--tokens``) and the requests retracted, drawn from GEN in this
    order by every engine, so one seed gives one workload."""
    n, tokens = options.requests, options.tokens
    low = max(2, tokens // 2)
    seqlens = {rid: int(torch.randint(low, tokens + 1, (1,), generator=gen)) for rid in range(n)}
    count = retracted_for(n, options.retract_fraction)
    retracted = sorted(int(i) for i in torch.randperm(n, generator=gen)[:count])
    return seqlens, retracted


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: no CUDA device is available (torch.cuda.is_available() is False)")
    if name not in ("cpu", "cuda"):
        raise InputError(f"--device must be auto, cpu or cuda, not '{name}'")
    return torch.device(name)


def _backend(analysis: Analysis) -> str:
    backend = analysis.backup.backend
    if backend == "none":
        raise InputError("retraction backup backend is 'none': retracted requests are aborted, nothing round-trips")
    return backend


def error_hazards(analysis: Analysis) -> list[Hazard]:
    """The launch line's error hazards (some SGLang refuses at start-up, some fail later); the round trip
    still tests the pool's copy path."""
    return [h for h in analysis.hazards if h.severity == ERROR]


def check_run(analysis: Analysis, options: RoundtripOptions) -> tuple[torch.device, Geometry, PoolSizes]:
    """Every refusal a run can meet (options, model, device, backend, fault, memory), before anything is
    allocated or drawn: the CLI calls it before its progress bar, so bad input is one line, not a crash."""
    check_options(options)
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


@dataclass
class _Run:
    """One run on kvdoctor's own pools: the mutable state of the round trip, one method per step
    (:class:`kvdoctor.roundtrip.steps.Driver`)."""

    analysis: Analysis
    opts: RoundtripOptions
    device: torch.device
    geo: Geometry
    sizing: PoolSizes
    fault: Fault | None
    gen: torch.Generator
    seqlens: dict[int, int]
    retracted: list[int]
    started: float
    names: StepNames = NAMES
    pools: Pools = field(init=False)
    protocol: RetractionProtocol = field(init=False)
    ledger: CopyLedger = field(default_factory=CopyLedger)
    session: Session = field(init=False)
    live: dict[int, Request] = field(default_factory=dict)
    before: dict[int, dict[str, diff_mod.Capture]] = field(default_factory=dict)
    at_visible: dict[int, dict[str, diff_mod.Capture]] = field(default_factory=dict)
    backups: dict[int, RetractionBackup] = field(default_factory=dict)
    background: list[torch.Tensor] = field(default_factory=list)
    padding_before: diff_mod.Capture | None = None

    def admit_and_fill(self, seqlens: dict[int, int]) -> None:
        reqs = [admit(self.pools, rid, n) for rid, n in seqlens.items()]
        fill_requests(self.pools, reqs, self.gen, self.analysis.spec.kv_dtype)
        for req in reqs:
            self.live[req.rid] = req
            self.before[req.rid] = diff_mod.capture_request(self.pools, req)

    def on_visible(self, req: Request) -> None:
        self.at_visible[req.rid] = diff_mod.capture_request(self.pools, req)

    # ---- the steps ---------------------------------------------------------------------------
    def build(self) -> None:
        analysis, fault = self.analysis, self.fault
        self.pools = build_pools(analysis, self.geo, self.sizing, self.device, scatter=self.gen)
        if fault is not None:
            fault.check(self.pools, analysis.config.source)
        protocol = default_protocol(analysis.layout, _backend(analysis))
        self.protocol = fault.apply(protocol) if fault is not None else protocol
        carries = backup_carries("host_pool", analysis.spec, analysis.layout, analysis.flags.page_size)
        self.session = Session(self.pools, Mover(self.device, self.opts.chunk), self.ledger, frozenset(carries))
        self.session.on_visible = self.on_visible

    def instrumented(self) -> contextlib.AbstractContextManager[None]:
        return nothing_held()

    def fill(self) -> None:
        self.background = fill_background(self.pools, self.gen)
        self.padding_before = diff_mod.capture_padding(self.pools)
        self.admit_and_fill(self.seqlens)

    def offload(self, rid: int) -> None:
        req = self.live.pop(rid)
        self.backups[rid] = self.protocol.backend.offload(self.protocol, self.session, req)
        release(self.pools, req)

    def reuse(self) -> None:
        """New requests take (and overwrite) every slot the retracted requests freed."""
        self.admit_and_fill({INTRUDER_BASE + rid: self.seqlens[rid] for rid in self.retracted})

    def restore(self, rid: int) -> None:
        req = admit(self.pools, rid, self.seqlens[rid])
        self.live[rid] = req
        self.protocol.backend.restore(self.protocol, self.session, req, self.backups.pop(rid))

    def restored(self) -> None:
        self.session.mover.arena.reset()  # every backup is restored: its host memory may be reused

    def diff(self) -> RoundtripResult:
        analysis, pools, fault = self.analysis, self.pools, self.fault
        after = {rid: diff_mod.capture_request(pools, req) for rid, req in self.live.items()}
        assert self.padding_before is not None
        obs = diff_mod.Observations(
            before=self.before,
            at_visible=self.at_visible,
            after=after,
            retracted=self.retracted,
            residents=sorted(r for r in self.live if r not in self.retracted),
            padding_before=self.padding_before,
            padding_after=diff_mod.capture_padding(pools),
            components=_present_components(analysis, pools),
            layer_ids=_layer_ids(self.geo),
            free=diff_mod.capture_free(
                pools, [*self.before.values(), *self.at_visible.values(), *after.values()], self.background
            ),
        )
        rows = component_checks(diff_mod.diff(obs, self.ledger))
        present = {row.name for row in rows}
        return RoundtripResult.of(
            device=str(self.device),
            kv_cache_dtype=analysis.spec.kv_dtype.flag,
            backend=self.protocol.backend.name,
            injected=self.opts.inject,
            components=rows,
            used=_used(analysis, self.opts, self.sizing, pools, self.geo, self.protocol, obs, after),
            expected_red=sorted(fault.expected(present)) if fault else [],
            hazards=error_hazards(analysis),
            elapsed_s=time.perf_counter() - self.started,
            rules_revision=analysis.rules_revision,
        )


def run_roundtrip(analysis: Analysis, options: RoundtripOptions, progress: Progress | None = None) -> RoundtripResult:
    """Run the retraction protocol on real pools and diff every component byte for byte."""
    started = time.perf_counter()
    report = progress or (lambda what, done, total: None)
    device, geo, sizing = check_run(analysis, options)
    fault: Fault | None = get_fault(options.inject) if options.inject else None
    gen = torch.Generator().manual_seed(options.seed)
    seqlens, retracted = draw_requests(options, gen)
    run = _Run(analysis, options, device, geo, sizing, fault, gen, seqlens, retracted, started)
    return run_steps(run, retracted, report)


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
    obs: diff_mod.Observations,
    after: dict[int, dict[str, diff_mod.Capture]],
) -> ModelUsed:
    scale_layout = None
    for sub in pools.sub_pools:
        for layout in sub.scale_layouts.values():
            scale_layout = "page-interleaved (FA4, page 128)" if layout.interleaved else "flat per slot"
    return ModelUsed(
        model=analysis.config.source,
        kv_pool=analysis.layout.kv_pool,
        token_index_space=_token_index_space(pools),
        cpu_copy_carries_mamba=protocol.mamba.claimed,
        caller_backs_up_mamba=analysis.layout.caller_backs_up_mamba,
        requests=opts.requests,
        retracted=sizing.retracted,
        max_tokens=opts.tokens,
        page_size=sizing.page_size,
        seed=opts.seed,
        reductions=opts.reductions.describe(),
        full_layers=geo.full.layers if geo.full else 0,
        swa_layers=geo.swa.layers if geo.swa else 0,
        recurrent_layers=geo.recurrent.layers if geo.recurrent else 0,
        kv_heads=geo.full.kv_heads if geo.full else (geo.swa.kv_heads if geo.swa else 0),
        sliding_window=geo.window,
        scale_layout=scale_layout,
        chunk=opts.chunk,
        pool_bytes=pool_bytes(pools),
        restored_into_new_slots=diff_mod.reused_slot(obs) is None,
        max_slot_runs=_max_slot_runs(after),
        reduction_limits=opts.reductions,
    )
