"""One round trip: admit requests, retract some, let intruders reuse their slots, restore, diff.

The pools are sized so the intruders must take every slot the retracted requests freed (and write
their own data there), and the restored requests land in slots they never held: a backup that
missed anything cannot be rescued by stale bytes that happened to survive. The diff checks that
last promise too (``slot_reuse``), and the allocators start shuffled, so requests hold scattered
pages and the copy engine's gather/scatter path is exercised, not only whole contiguous runs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields

import pandas as pd
import torch

from kvdoctor._exceptions import InputError
from kvdoctor.core.sglang import rules
from kvdoctor.core.sglang.analysis import Analysis
from kvdoctor.core.sglang.policy import backup_carries
from kvdoctor.report.envelope import EngineRef
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

Progress = Callable[[str, int, int], None]  # (what is running now, steps finished, steps in all)
INTRUDER_BASE = 1_000_000


class Steps:
    """Reports each step as it STARTS, so a progress bar names what is running, not what just ended.

    ``start(what)`` reports (WHAT, steps finished, TOTAL); ``finish()`` reports every step finished.
    TOTAL must be the number of ``start`` calls the run makes.
    """

    def __init__(self, report: Progress, total: int) -> None:
        self.report, self.total, self.done, self._running = report, total, 0, False

    def start(self, what: str) -> None:
        if self._running:
            self.done += 1
        self._running = True
        self.report(what, self.done, self.total)

    def finish(self) -> None:
        self.done = self.total
        self.report("done", self.total, self.total)


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


@dataclass(frozen=True)
class ComponentRow:
    """One row of the verdict: a state component of the retracted requests, or one of the checks
    beside them (``padding_slot``, ``free_slots``, ``resident_requests``, ``slot_reuse``,
    ``backup_aliasing``). The ``first_*`` fields locate the first differing byte (None when none)."""

    name: str
    bytes: int  # bytes compared
    mismatched_bytes: int
    equal: bool  # every compared byte agrees
    copies_out: int  # most copies out (device -> host) of this component for one request
    copies_in: int
    bytes_out: int  # bytes the copy ledger saw move out, all requests
    bytes_in: int
    ledger_ok: bool  # exactly one copy each way per request, of exactly the compared bytes
    first_request: int | None
    first_plane: str | None
    first_layer: int | None
    first_position: int | None
    first_slot: int | None
    ok: bool  # equal and ledger_ok: this row passes

    @classmethod
    def of(cls, record: Mapping[str, object]) -> ComponentRow:
        """A row of ``diff.diff``'s frame (numpy scalars, ``pd.NA``) as plain Python values."""
        kinds = {f.name: f.type for f in fields(cls)}
        values = {name: _plain(record[name], str(kind)) for name, kind in kinds.items()}
        return cls(**values)  # type: ignore[arg-type]


def _plain(value: object, kind: str) -> object:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    if kind.startswith("bool"):
        return bool(value)
    if kind.startswith("int"):
        return int(value)  # type: ignore[call-overload]
    return str(value)


def component_rows(frame: pd.DataFrame) -> list[ComponentRow]:
    """The diff's frame as typed rows, in its order."""
    return [ComponentRow.of(record) for record in frame.to_dict("records")]


@dataclass(frozen=True)
class HazardRow:
    """An error hazard of the launch line (``inspect`` explains it); the round trip still tests the pool's copy."""

    severity: str
    code: str
    message: str


@dataclass(frozen=True)
class ModelUsed:
    """What a run on kvdoctor's own model of SGLang's pools used (the ``used`` key of its report)."""

    model: str
    kv_pool: str
    token_index_space: str
    cpu_copy_carries_mamba: bool
    caller_backs_up_mamba: bool
    requests: int
    retracted: int
    max_tokens: int
    page_size: int
    seed: int
    reductions: str  # prose, as printed (kept: users parse it); ``reduction_limits`` is the same, structured
    full_layers: int
    swa_layers: int
    recurrent_layers: int
    kv_heads: int
    sliding_window: int | None
    scale_layout: str | None
    chunk: int
    pool_bytes: int
    restored_into_new_slots: bool
    max_slot_runs: int
    reduction_limits: Reductions  # {layers, heads}: at most this many per sub-pool; null keeps the model's


@dataclass(frozen=True)
class EngineUsed:
    """What a run on the installed SGLang used: its classes, what kvdoctor supplied, every stub."""

    model: str
    engine: str
    sglang_version: str
    kv_pool: str
    pool_classes: dict[str, str]
    cpu_copy_carries_mamba: bool
    requests: int
    retracted: int
    max_tokens: int
    page_size: int
    seed: int
    backend_source: str
    data: str
    stubs: list[str]
    notes: list[str]
    pool_tokens: int
    request_rows: int
    emulate_d2h: bool
    admission: str


@dataclass(frozen=True)
class RoundtripResult:
    """The verdict, the per-component rows, and what the run used: what ``--json`` prints (after the
    report header), what the tables, the JUnit file and the step summary are rendered from.

    Build it with :meth:`of`, which derives ``ok``, ``failing`` and ``inject_matched`` from the rows,
    so they cannot disagree with them.
    """

    ok: bool
    device: str
    kv_cache_dtype: str
    backend: str
    injected: str | None
    failing: list[str]
    expected_red: list[str]
    inject_matched: bool | None  # did the injected fault turn exactly its own rows red (None: nothing injected)
    hazards: list[HazardRow]
    components: list[ComponentRow]
    used: ModelUsed | EngineUsed
    elapsed_s: float
    engine: EngineRef | None = None  # None: kvdoctor's own model; else the installed server that ran
    rules_revision: str | None = None  # the rules kvdoctor's model restates; None when SGLang's own code ran

    @classmethod
    def of(
        cls,
        *,
        device: str,
        kv_cache_dtype: str,
        backend: str,
        injected: str | None,
        components: list[ComponentRow],
        used: ModelUsed | EngineUsed,
        expected_red: list[str],
        hazards: list[HazardRow],
        elapsed_s: float,
        engine: EngineRef | None = None,
        rules_revision: str | None = None,
    ) -> RoundtripResult:
        failing = [row.name for row in components if not row.ok]
        return cls(
            ok=not failing,
            device=device,
            kv_cache_dtype=kv_cache_dtype,
            backend=backend,
            injected=injected,
            failing=failing,
            expected_red=expected_red,
            inject_matched=None if injected is None else set(failing) == set(expected_red),
            hazards=hazards,
            components=components,
            used=used,
            elapsed_s=round(elapsed_s, 3),
            engine=engine,
            rules_revision=rules_revision,
        )

    @property
    def exit_code(self) -> int:
        """0 when every row passes, 1 when anything differs."""
        return 0 if self.ok else 1

    def row(self, name: str) -> ComponentRow:
        return next(r for r in self.components if r.name == name)


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


def error_hazards(analysis: Analysis) -> list[HazardRow]:
    """The launch line's error hazards (some SGLang refuses at start-up, some fail later); the round trip
    still tests the pool's copy path."""
    return [HazardRow(h.severity, h.code, h.message) for h in analysis.hazards if h.severity == "error"]


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
    steps = Steps(report, 4 + 2 * retract_count)

    steps.start("allocate pools")
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

    steps.start("fill requests")
    background_states = fill_background(pools, gen)
    padding_before = diff_mod.capture_padding(pools)
    run.admit_and_fill(seqlens)

    backups = {}
    for rid in retracted:
        steps.start(f"offload request {rid}")
        req = run.live.pop(rid)
        backups[rid] = protocol.backend.offload(protocol, run.session, req)
        release(pools, req)

    steps.start("intruders reuse the freed slots")
    admit_intruders(run, seqlens, retracted)

    for rid in retracted:
        steps.start(f"restore request {rid}")
        req = admit(pools, rid, seqlens[rid])
        run.live[rid] = req
        protocol.backend.restore(protocol, run.session, req, backups.pop(rid))
    run.session.mover.arena.reset()  # every backup is restored: its host memory may be reused

    steps.start("diff every component")
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
    rows = component_rows(diff_mod.diff(obs, ledger))
    present = {row.name for row in rows}
    result = RoundtripResult.of(
        device=str(device),
        kv_cache_dtype=analysis.spec.kv_dtype.flag,
        backend=protocol.backend.name,
        injected=options.inject,
        components=rows,
        used=_used(analysis, options, sizing, pools, geo, protocol, obs, after),
        expected_red=sorted(fault.expected(present)) if fault else [],
        hazards=error_hazards(analysis),
        elapsed_s=time.perf_counter() - started,
        rules_revision=analysis.rules_revision,
    )
    steps.finish()
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
