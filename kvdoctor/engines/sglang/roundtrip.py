"""``roundtrip --engine sglang``: SGLang's own retraction path on SGLang's own pools, diffed bitwise.

What is SGLang's here: the launch-line resolution, the pool classes and their sizes' meaning (built
by ``KVCacheConfigurator._init_pools``), the allocators, the request-to-token pool, ``Req``, and the
whole backup/restore chain: ``mem_cache.common.backup_kv_cache`` → ``Req.offload_kv_cache`` → the
pools' ``get_cpu_copy``; ``restore_kv_cache`` → ``Req.load_kv_cache`` → ``load_cpu_copy``.

What kvdoctor brings, as a running server would: the data written into the pools (MXFP8 through
SGLang's own ``set_kv_buffer`` where the pool stores page-interleaved scales, random bytes
elsewhere), the admission of requests through SGLang's allocators, the intruders that reuse every
freed slot, the diff, the copy ledger and the faults (wrappers on SGLang's objects). The scheduler's
prealloc queue and tree cache are not run: admission and release call the allocators directly.

Slot reuse is forced, not hoped for: the pools hold exactly the live requests plus one placeholder
per retracted request, so the intruders can only take the slots the retracted requests freed, and
the restored requests land in the placeholders' slots, which they never held.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from kvdoctor import mxfp8
from kvdoctor._exceptions import EngineFinding, InputError, NotRunnableHere
from kvdoctor.engines import GpuArch
from kvdoctor.engines.sglang import _pools, _runtime
from kvdoctor.engines.sglang._faults import EngineFault, FaultState, get_engine_fault
from kvdoctor.engines.sglang._instruments import Instruments, Patches
from kvdoctor.engines.sglang._planes import StatePlane, components, planes_of
from kvdoctor.engines.sglang.inspect import failed_inside
from kvdoctor.roundtrip.options import RoundtripOptions
from kvdoctor.roundtrip.result import ComponentCheck, EngineUsed, RoundtripResult
from kvdoctor.roundtrip.steps import INTRUDER_BASE, Progress, StepNames, run_steps
from kvdoctor.state import diff as diff_mod
from kvdoctor.state.run import component_checks, draw_requests, resolve_device

PLACEHOLDER_BASE = 2_000_000
NAMES = StepNames(
    build="build SGLang's pools",
    offload="back up request {rid} (SGLang backup_kv_cache)",
    restore="restore request {rid} (SGLang restore_kv_cache)",
)
ALIASING = "backup_aliasing"


@dataclass(frozen=True)
class EngineOptions:
    """What ``--engine sglang`` adds to the round trip's options."""

    arch: GpuArch = GpuArch.SM100
    emulate_d2h: bool = False


@dataclass
class _Live:
    req: Any
    seqlen: int


@dataclass
class _Run:
    pools: _pools.EnginePools
    planes: list[StatePlane]
    instruments: Instruments
    state: FaultState
    gen: torch.Generator
    live: dict[int, _Live] = field(default_factory=dict)
    held: dict[str, set[int]] = field(default_factory=dict)  # role -> every slot a request ever held

    # ---- slots -------------------------------------------------------------------------------
    def token_slots(self, req: Any, n: int) -> torch.Tensor:
        row = self.pools.req_to_token_pool.req_to_token[req.kv.req_pool_idx, :n]
        return row.to(torch.int64)

    def slots(self, live: _Live, role: str, *, moved: bool = True) -> torch.Tensor:
        """The slots of ROLE a retraction moves (``seqlen - 1`` tokens), or all it holds."""
        n = live.seqlen - 1 if moved else live.seqlen
        full = self.token_slots(live.req, n)
        if role == "full":
            return full
        if role == "swa":
            mapped = self.pools.full_to_swa[full].to(torch.int64)
            return mapped[mapped > 0]
        idx = live.req.kv.mamba_pool_idx
        return idx.reshape(1).to(torch.int64) if idx is not None else torch.empty(0, dtype=torch.int64)

    def remember(self, live: _Live) -> None:
        for role in ("full", "swa", "mamba"):
            if role == "swa" and self.pools.full_to_swa is None:
                continue
            self.held.setdefault(role, set()).update(self.slots(live, role, moved=False).tolist())

    # ---- capture -----------------------------------------------------------------------------
    def capture(self, live: _Live) -> dict[str, diff_mod.Capture]:
        out: dict[str, diff_mod.Capture] = {}
        by_role = {role: self.slots(live, role) for role in {p.role for p in self.planes}}
        for plane in self.planes:
            where = by_role[plane.role]
            cap = out.setdefault(plane.component, diff_mod.Capture({}, where.cpu().clone()))
            cap.planes[plane.name] = plane.capture(where.to(plane.buffers[0].device))
        return out


def _resolve_backend(runtime: _runtime.Runtime, pools: _pools.EnginePools) -> tuple[str, str]:
    """SGLang's own resolution of the retraction backend for these pools (decode servers only)."""
    ctx = _runtime.import_sglang("sglang.srt.runtime_context")
    if ctx.get_disagg().disaggregation_mode != "decode":
        return "cpu_tensor", "not a decode server: SGLang recomputes retracted requests; cpu_tensor exercised"
    backend, _ = _pools.resolve_backup(runtime, pools, None)
    return backend, "resolved by SGLang's resolve_decode_retraction_backup"


def _check_backend(backend: str) -> None:
    if backend == "none":
        raise InputError("retraction backup backend is 'none': retracted requests are aborted, nothing round-trips")
    if backend != "cpu_tensor":
        raise NotRunnableHere(
            f"retraction backup '{backend}' needs SGLang's UnifiedRadixCache with HiCache attached, which "
            "roundtrip --engine sglang does not build; pass --disaggregation-decode-retraction-backup cpu_tensor, "
            "or use the default engine (it models host_pool)"
        )


def _check_scale_writes(pools: _pools.EnginePools, device: torch.device) -> None:
    """Flat MXFP8 scales are written by an indexed assignment into a float8_e8m0fnu tensor; probe it."""
    for pool in pools.sub_pools.values():
        if getattr(pool, "k_scale_buffer", None) and not getattr(pool, "mxfp8_sf_interleaved", False):
            probe = torch.zeros(4, dtype=torch.float8_e8m0fnu, device=device)
            try:
                probe[torch.tensor([1], device=device)] = torch.zeros(1, dtype=torch.float8_e8m0fnu, device=device)
            except (RuntimeError, NotImplementedError) as exc:
                raise NotRunnableHere(
                    f"not runnable on {device.type}: {type(pool).__name__} stores flat MXFP8 scales (page size "
                    f"{pools.page_size}, not 128) and its _write_scales does an indexed assignment into a "
                    f"float8_e8m0fnu tensor, which torch on {device.type} does not implement "
                    f"({' '.join(str(exc).split())[:120]}); SGLang itself asserts page 128 for MXFP8 writes"
                ) from None


def _plan(runtime: _runtime.Runtime, seqlens: dict[int, int], retracted: list[int]) -> _pools.PoolPlan:
    ctx = _runtime.import_sglang("sglang.srt.runtime_context")
    page = int(ctx.get_schedule().page_size)
    pages = sum(-(-n // page) for n in seqlens.values()) + sum(-(-seqlens[r] // page) for r in retracted)
    return _pools.PoolPlan(
        rows=len(seqlens) + len(retracted),
        pages=pages,
        page_size=page,
        mamba_slots_per_request=_pools.mamba_slots_per_request(runtime),
    )


def _bind(run: _Run, req: Any, rid: object, seqlen: int) -> _Live:
    """Give REQ a request row (and its mamba slot) and SEQLEN token slots through SGLang's pools."""
    pools = run.pools
    if pools.req_to_token_pool.alloc([req]) is None:
        raise EngineFinding(f"SGLang's req_to_token_pool has no free row for request {rid}")
    device = pools.device
    if pools.page_size == 1:
        loc = pools.allocator.alloc(seqlen)
    else:
        zero = torch.zeros(1, dtype=torch.int64)
        lens = torch.tensor([seqlen], dtype=torch.int64)
        last = torch.full((1,), -1, dtype=torch.int64, device=device)
        loc = pools.allocator.alloc_extend(zero.to(device), zero, lens.to(device), lens, last, seqlen)
    if loc is None:
        raise EngineFinding(f"SGLang's allocator has no room for {seqlen} tokens of request {rid}")
    pools.req_to_token_pool.write((req.kv.req_pool_idx, slice(0, seqlen)), loc.to(torch.int32))
    req.kv.kv_allocated_len = seqlen
    live = _Live(req, seqlen)
    run.remember(live)
    return live


def _admit(run: _Run, rid: int, seqlen: int) -> _Live:
    """A new request: SGLang's ``Req`` with SEQLEN prompt tokens, bound to fresh slots."""
    sched = _runtime.import_sglang("sglang.srt.managers.schedule_batch")
    sampling = _runtime.import_sglang("sglang.srt.sampling.sampling_params")
    req = sched.Req(str(rid), "", list(range(seqlen)), sampling.SamplingParams())
    return _bind(run, req, rid, seqlen)


def _release(run: _Run, live: _Live) -> None:
    """What releasing a retracted request frees: its token slots, its mamba slot, its row."""
    pools, req = run.pools, live.req
    pools.allocator.free(run.token_slots(req, live.seqlen))
    if req.kv.mamba_pool_idx is not None and hasattr(pools.req_to_token_pool, "free_mamba_cache"):
        pools.req_to_token_pool.free_mamba_cache(req)
    pools.req_to_token_pool.free(req)


def _fill(run: _Run, lives: list[_Live]) -> str:
    """Write each request's state the way a server would.

    MXFP8 pools on a CUDA device: SGLang's own ``set_kv_buffer`` (its ``quant_store_kv_mxfp8``
    kernel quantizes bf16 K/V and scatters the scales). On a CPU that kernel only runs under the
    Triton interpreter, at about 30 ms per token and layer, so kvdoctor's MXFP8 codec (bit-exact with
    SGLang's quantizer; ``tests/engines`` checks the two agree) writes payload and scales instead.
    Every other buffer gets random bytes: a retraction moves bytes, and the diff judges bytes.
    """
    how = ["random bytes by kvdoctor"]
    for role, pool in run.pools.sub_pools.items():
        slots = torch.cat([run.slots(live, role) for live in lives])
        if slots.numel() == 0:
            continue
        if getattr(pool, "k_scale_buffer", None):
            how.append(_fill_mxfp8(run, role, pool, slots))
            continue
        _fill_random(run, role, slots)
    if run.pools.mamba_pool is not None:
        _fill_random(run, "mamba", torch.cat([run.slots(live, "mamba") for live in lives]))
    return "; ".join(dict.fromkeys(how))


def _fill_random(run: _Run, role: str, slots: torch.Tensor) -> None:
    for plane in (p for p in run.planes if p.role == role):
        for buf in plane.buffers:
            plane.write(buf, slots.to(buf.device), _random_rows(plane, buf, slots.numel(), run.gen))


def _fill_mxfp8(run: _Run, role: str, pool: Any, slots: torch.Tensor) -> str:
    by_name = {p.name: p for p in run.planes if p.role == role}
    n, heads = slots.numel(), pool.head_num
    for i in range(pool.layer_num):
        k = torch.randn((n, heads, pool.head_dim), generator=run.gen).to(torch.bfloat16)
        v = torch.randn((n, heads, pool.v_head_dim), generator=run.gen).to(torch.bfloat16)
        if pool.device != "cpu" and getattr(pool, "mxfp8_sf_interleaved", False):
            pool.set_kv_buffer(
                None,
                slots.to(pool.device),
                k.to(pool.device),
                v.to(pool.device),
                layer_id_override=pool.start_layer + i,
            )
            continue

        for name, x in (("k", k), ("v", v)):
            q = mxfp8.quantize(x)
            payload, scale = by_name[name], by_name[f"{name}_scale"]
            payload.write(payload.buffers[i], slots, q.payload.view(torch.uint8).reshape(n, -1))
            scale.write(scale.buffers[i], slots, q.scales.view(torch.uint8).reshape(n, -1))
    if pool.device != "cpu" and getattr(pool, "mxfp8_sf_interleaved", False):
        return "MXFP8 through SGLang's set_kv_buffer (quant_store_kv_mxfp8)"
    return "MXFP8 by kvdoctor's codec into SGLang's buffers (SGLang's Triton store is interpreter-only on CPU)"


def _random_rows(plane: StatePlane, buf: torch.Tensor, n: int, gen: torch.Generator) -> torch.Tensor:
    width = plane.read(buf, torch.zeros(1, dtype=torch.int64, device=buf.device)).shape[1]
    return torch.randint(0, 256, (n, width), dtype=torch.uint8, generator=gen)


def _background(planes: list[StatePlane], gen: torch.Generator) -> list[list[torch.Tensor]]:
    """Random bytes everywhere (slot 0 too), and a host snapshot to compare never-held slots against."""
    snapshot = []
    for plane in planes:
        copies = []
        for buf in plane.buffers:
            raw = buf.view(torch.uint8)
            raw.copy_(torch.randint(0, 256, tuple(raw.shape), dtype=torch.uint8, generator=gen).to(raw.device))
            copies.append(buf.to("cpu", copy=True))
        snapshot.append(copies)
    return snapshot


def _padding(run: _Run, snapshot: list[list[torch.Tensor]] | None = None) -> diff_mod.Capture:
    zero = torch.zeros(1, dtype=torch.int64)
    planes: dict[str, torch.Tensor] = {}
    for i, plane in enumerate(run.planes):
        bufs = snapshot[i] if snapshot is not None else plane.buffers
        planes[f"{plane.component}.{plane.name}"] = torch.stack([plane.read(b, zero.to(b.device)).cpu() for b in bufs])
    return diff_mod.Capture(planes, zero)


def _free(run: _Run, snapshot: list[list[torch.Tensor]]) -> dict[str, tuple[diff_mod.Capture, diff_mod.Capture]]:
    out: dict[str, tuple[diff_mod.Capture, diff_mod.Capture]] = {}
    for plane, copies in zip(run.planes, snapshot, strict=True):
        free = torch.ones(plane.slots, dtype=torch.bool)
        free[0] = False
        held = sorted(s for s in run.held.get(plane.role, ()) if s < plane.slots)
        free[held] = False
        slots = free.nonzero().flatten()
        if not slots.numel():
            continue
        was, now = out.setdefault(plane.component, (diff_mod.Capture({}, slots), diff_mod.Capture({}, slots)))
        was.planes[plane.name] = torch.stack([plane.read(c, slots) for c in copies])
        now.planes[plane.name] = plane.capture(slots.to(plane.buffers[0].device))
    return out


def _aliasing_row(instruments: Instruments, emulated: bool) -> ComponentCheck:
    """Backups that are views of a live pool, not copies (passes under --emulate-d2h, still reported)."""
    aliases = instruments.aliases
    nbytes = sum(a.nbytes for a in aliases)
    first = aliases[0] if aliases else None
    ok = not aliases or emulated
    return ComponentCheck(
        name=ALIASING,
        bytes=nbytes,
        mismatched_bytes=0 if ok else nbytes,
        equal=ok,
        copies_out=0,
        copies_in=0,
        bytes_out=0,
        bytes_in=0,
        ledger_ok=True,
        first_request=int(first.rid) if first else None,
        first_plane=str(first.component) if first else None,
        first_layer=None,
        first_position=None,
        first_slot=None,
        ok=ok,
    )


def _call_sglang(what: str, fn: Callable[[], Any]) -> Any:
    """Run SGLang's code; an exception it raises is a finding about SGLang (exit 1), with its frame."""
    try:
        return fn()
    except (InputError, EngineFinding):
        raise
    except Exception as exc:
        different = _runtime.api_difference(exc, f"kvdoctor's call for {what} failed")
        if different is not None:
            raise different from exc
        msg = " ".join(str(exc).split())[:200]
        raise EngineFinding(
            f"SGLang raised during {what}: {type(exc).__name__}: {msg} ({_runtime.sglang_frame(exc)})"
        ) from exc


def run_roundtrip(
    model: str,
    server_argv: list[str],
    options: RoundtripOptions,
    engine: EngineOptions = EngineOptions(),
    progress: Progress | None = None,
) -> RoundtripResult:
    """Round-trip MODEL's state through the installed SGLang's retraction path and diff it bitwise."""
    started = time.perf_counter()
    report = progress or (lambda what, done, total: None)
    if options.reductions.layers or options.reductions.heads:
        raise InputError("--layers/--heads reduce kvdoctor's own pools; with --engine sglang the shapes are SGLang's")
    device = resolve_device(options.device)
    fault: EngineFault | None = get_engine_fault(options.inject) if options.inject else None
    report("import SGLang and resolve the launch line", 0, 0)
    runtime = _runtime.resolve(model, server_argv, engine.arch)
    try:
        return _run(runtime, model, options, engine, device, fault, report, started)
    except Exception as exc:
        different = _runtime.api_difference(exc, "roundtrip's call into it failed")
        if different is not None:
            raise different from exc  # another version's API, never a finding about SGLang: exit 2
        failed = failed_inside(exc, "roundtrip --engine sglang")
        if failed is not None:
            raise failed from exc  # SGLang's own code failed outside a checked step: no verdict, exit 3
        raise
    finally:
        runtime.close()


@dataclass
class _Steps:
    """One round trip on the installed SGLang, one method per step (:class:`kvdoctor.roundtrip.steps.Driver`)."""

    runtime: _runtime.Runtime
    model: str
    options: RoundtripOptions
    engine: EngineOptions
    device: torch.device
    fault: EngineFault | None
    gen: torch.Generator
    seqlens: dict[int, int]
    retracted: list[int]
    started: float
    names: StepNames = NAMES
    run: _Run = field(init=False)
    plan: _pools.PoolPlan = field(init=False)
    backend: str = field(init=False)
    backend_source: str = field(init=False)
    present: list[str] = field(init=False)
    backup_fn: Any = field(init=False)  # sglang.srt.mem_cache.common.backup_kv_cache (0.5.20: retraction_backup)
    restore_fn: Any = field(init=False)  # ... restore_kv_cache (0.5.20: retraction_restore)
    snapshot: list[list[torch.Tensor]] = field(default_factory=list)
    padding_before: diff_mod.Capture | None = None
    placeholders: list[_Live] = field(default_factory=list)
    data_source: str = ""
    before: dict[int, dict[str, diff_mod.Capture]] = field(default_factory=dict)
    at_visible: dict[int, dict[str, diff_mod.Capture]] = field(default_factory=dict)

    def build(self) -> None:
        runtime, fault = self.runtime, self.fault
        self.plan = _plan(runtime, self.seqlens, self.retracted)
        pools = _pools.build(runtime, self.plan, str(self.device))
        self.backend, self.backend_source = _resolve_backend(runtime, pools)
        _check_backend(self.backend)
        _check_scale_writes(pools, self.device)
        planes = planes_of(pools)
        if any(p.component == "mla_kv" for p in planes):
            raise NotRunnableHere(
                f"roundtrip --engine sglang does not read {type(pools.kv_pool).__name__}'s CPU copies "
                "yet (MLA); use the default engine for this model"
            )
        self.present = components(planes)
        if fault is not None:
            fault.check(pools, self.model)
        instruments = Instruments(planes, emulate_d2h=self.engine.emulate_d2h)
        self.run = _Run(pools, planes, instruments, FaultState(), self.gen)
        self.backup_fn, self.restore_fn = _runtime.retraction_functions("roundtrip --engine sglang")

    @contextlib.contextmanager
    def instrumented(self) -> Iterator[None]:
        """The faults and the copy ledger's wrappers on SGLang's objects, from the fill to the last restore."""
        run, fault = self.run, self.fault
        patches = Patches()
        try:
            if fault is not None and fault.inner:
                fault.install(patches, run.pools, run.state)
            run.instruments.install(patches, run.pools.sub_pools, run.pools.mamba_pool)
            if fault is not None and not fault.inner:
                fault.install(patches, run.pools, run.state)
            yield
        finally:
            patches.close()

    def fill(self) -> None:
        run, seqlens = self.run, self.seqlens
        self.snapshot = _background(run.planes, self.gen)
        self.padding_before = _padding(run, self.snapshot)
        lives = [_admit(run, rid, n) for rid, n in seqlens.items()]
        self.placeholders = [_admit(run, PLACEHOLDER_BASE + r, seqlens[r]) for r in self.retracted]
        self.data_source = _call_sglang("the fill", lambda: _fill(run, lives))
        self.before = {rid: run.capture(live) for rid, live in zip(seqlens, lives, strict=True)}
        run.live = dict(zip(seqlens, lives, strict=True))

    def offload(self, rid: int) -> None:
        run, backend = self.run, self.backend
        rtt, alloc = run.pools.req_to_token_pool, run.pools.allocator
        live = run.live.pop(rid)
        run.instruments.rid = rid
        saved = _call_sglang(
            f"backup_kv_cache of request {rid}",
            lambda: self.backup_fn(live.req, None, rtt, alloc, backend),
        )
        if saved is False:
            raise EngineFinding(f"SGLang's backup_kv_cache returned False for request {rid} (it would abort it)")
        _release(run, live)
        run.live[rid] = live

    def reuse(self) -> None:
        run = self.run
        intruders = [_admit(run, INTRUDER_BASE + rid, self.seqlens[rid]) for rid in self.retracted]
        _fill(run, intruders)
        for ph in self.placeholders:
            _release(run, ph)
        run.state.restoring = True

    def restore(self, rid: int) -> None:
        run, backend = self.run, self.backend
        rtt, alloc = run.pools.req_to_token_pool, run.pools.allocator
        live = _readmit(run, run.live[rid])
        run.live[rid] = live
        run.instruments.rid = rid
        _call_sglang(
            f"restore_kv_cache of request {rid}",
            lambda: self.restore_fn(live.req, None, rtt, alloc, backend),
        )
        self.at_visible[rid] = run.capture(live)  # the request is runnable from here on
        _call_sglang(f"the deferred restore of request {rid}", run.state.run_deferred)

    def restored(self) -> None:
        self.run.state.restoring = False

    def diff(self) -> RoundtripResult:
        run, retracted, fault, engine = self.run, self.retracted, self.fault, self.engine
        after = {rid: run.capture(live) for rid, live in run.live.items()}
        assert self.padding_before is not None
        obs = diff_mod.Observations(
            before=self.before,
            at_visible=self.at_visible,
            after=after,
            retracted=retracted,
            residents=sorted(r for r in run.live if r not in retracted),
            padding_before=self.padding_before,
            padding_after=_padding(run),
            components=self.present,
            free=_free(run, self.snapshot),
        )
        ledger = run.instruments.ledger
        rows = [*component_checks(diff_mod.diff(obs, ledger)), _aliasing_row(run.instruments, engine.emulate_d2h)]
        names = {row.name for row in rows}
        used = _used(
            self.model,
            self.runtime,
            run.pools,
            self.options,
            retracted,
            self.plan,
            self.data_source,
            self.backend_source,
            engine,
        )
        return RoundtripResult.of(
            device=str(self.device),
            kv_cache_dtype=self.runtime.kv_cache_dtype_str,
            backend=self.backend,
            injected=self.options.inject,
            components=rows,
            used=used,
            expected_red=sorted(fault.expected(names)) if fault else [],
            hazards=[],
            elapsed_s=time.perf_counter() - self.started,
            engine=self.runtime.info,
            rules_revision=None,  # SGLang's own code ran: no kvdoctor rule took part
        )


def _run(
    runtime: _runtime.Runtime,
    model: str,
    options: RoundtripOptions,
    engine: EngineOptions,
    device: torch.device,
    fault: EngineFault | None,
    report: Progress,
    started: float,
) -> RoundtripResult:
    gen = torch.Generator().manual_seed(options.seed)
    seqlens, retracted = draw_requests(options, gen)
    steps = _Steps(runtime, model, options, engine, device, fault, gen, seqlens, retracted, started)
    return run_steps(steps, retracted, report)


def _readmit(run: _Run, old: _Live) -> _Live:
    """The retracted request comes back: a new row, new slots and a new mamba slot, same ``Req``."""
    return _bind(run, old.req, old.req.rid, old.seqlen)


def _used(
    model: str,
    runtime: _runtime.Runtime,
    pools: _pools.EnginePools,
    options: RoundtripOptions,
    retracted: list[int],
    plan: _pools.PoolPlan,
    data_source: str,
    backend_source: str,
    engine: EngineOptions,
) -> EngineUsed:
    classes = pools.classes()
    notes = [n for n in (_runtime.version_note(runtime.info), _runtime.interpreter_note()) if n]
    if engine.emulate_d2h:
        notes.append(
            "--emulate-d2h: backup tensors that alias a live pool are copied, as a device-to-host copy "
            "would; the aliasing row reports them but does not fail"
        )
    return EngineUsed(
        model=model,
        engine="sglang",
        sglang_version=runtime.info.version,
        kv_pool=classes["kv_pool"],
        pool_classes=classes,
        cpu_copy_carries_mamba=bool(pools.kv_pool.cpu_copy_carries_mamba),
        requests=options.requests,
        retracted=len(retracted),
        max_tokens=options.tokens,
        page_size=plan.page_size,
        seed=options.seed,
        backend_source=backend_source,
        data=data_source,
        stubs=list(runtime.stubs),
        notes=notes,
        pool_tokens=plan.tokens,
        request_rows=plan.rows,
        emulate_d2h=engine.emulate_d2h,
        admission="kvdoctor calls SGLang's allocators directly (the prealloc queue and tree cache are not run)",
    )
