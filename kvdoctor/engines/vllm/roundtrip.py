"""``roundtrip --server vllm --engine vllm``: vLLM's own ``CPUOffloadingWorker`` stores a request's blocks of every
KV-cache group to CPU and loads them into fresh block ids; kvdoctor diffs each group's components bitwise.

vLLM builds the specs and groups (the same questions ``inspect --engine vllm`` asks: its spec classes, its Mamba
state calculators, ``get_kv_cache_groups``); kvdoctor allocates one ``(num_blocks, page_size_bytes)`` int8 tensor
per layer (the shape ``CPUOffloadingWorker.__init__`` views every KV tensor as), fills it with seeded random bytes,
and hands vLLM a ``CanonicalKVCaches`` with one ``CanonicalKVCacheRef`` per layer. The worker's store handler and
load handler (``v1/kv_offload/cpu/gpu_worker.py``) write their own (src, dst, size) descriptors; the shims of
``_offload_shims`` only execute them on CPU. A sliding-window group moves only its window's blocks, a Mamba group
its one state block (vLLM's ``mamba_cache_mode`` none), a full-attention group every block of the request.

Faults wrap vLLM's objects: ``drop-group`` skips the last group's descriptors in the store handler
(``_fill_group_ops``), ``reorder-blocks`` swaps the first two fresh block ids of the first group that moves two
blocks in the load spec,
``skip-scales`` splits every page-sized store descriptor of a group with in-page scales (the ``*_per_token_head``
KV dtypes) into the data runs of its (head, slot) cells, so no scale byte is stored.

:func:`roundtrip_result` maps the run onto the one :class:`~kvdoctor.roundtrip.result.RoundtripResult` every
reporter reads: one row per group component (bytes compared, and the bytes of that component vLLM's descriptors
moved each way), then one ``g<i>.ledger`` row per group (blocks x layers x page bytes, out and in).
"""

from __future__ import annotations

import bisect
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from kvdoctor._exceptions import InputError, InternalError
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.core.faults import roundtrip_names
from kvdoctor.core.servers import Server
from kvdoctor.core.vllm.analysis import analyze_vllm
from kvdoctor.core.vllm.specs import SpecKind
from kvdoctor.engines.vllm import _offload_shims as shims
from kvdoctor.engines.vllm import _runtime as rt
from kvdoctor.engines.vllm import cache_config
from kvdoctor.engines.vllm import window_hit as swa
from kvdoctor.engines.vllm.inspect import mamba_state, server_failures, vllm_spec
from kvdoctor.roundtrip.faults import check_fault
from kvdoctor.roundtrip.result import ComponentCheck, RoundtripResult, VllmGroup, VllmUsed

__all__ = ["FAULTS", "WORKER", "GroupCopy", "VllmRoundtrip", "VllmRow", "roundtrip_result", "run_vllm_roundtrip"]

FAULTS = roundtrip_names(Server.VLLM)  # the faults this engine acts on, from the registry
WORKER = "CPUOffloadingWorker"  # v1/kv_offload/cpu/gpu_worker.py: stores and loads every group's blocks
MEMORY_SHARE = 0.5  # the run allocates at most this share of the memory available now (else exit 2)
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class VllmRow:
    """One group's component, compared bitwise over every layer of the group and every moved block."""

    name: str  # g<index>.<component>
    group: int
    component: str
    bytes: int
    mismatched_bytes: int
    equal: bool
    bytes_out: int = 0  # bytes of this component vLLM's store descriptors read, every layer and block
    bytes_in: int = 0  # ... and its load descriptors wrote into the fresh blocks
    copies_out: int = 0  # the most store descriptors that covered one byte of this component in one (layer, block)
    copies_in: int = 0
    first_layer: int | None = None  # the first differing byte: the layer's index in the group, its name,
    first_layer_name: str | None = None  # and the fresh block id it landed in
    first_block: int | None = None

    @property
    def ledger_ok(self) -> bool:
        """Every byte of the component moved out once and in once."""
        return self.bytes_out == self.bytes_in == self.bytes and self.copies_out == self.copies_in == 1

    @property
    def ok(self) -> bool:
        return self.equal and self.ledger_ok


@dataclass(frozen=True)
class GroupCopy(VllmGroup):
    """The copy ledger of one group, as the result carries it (:class:`VllmGroup`), and how often vLLM's
    descriptors touched the group's most-copied (layer, block): what the group's ledger row reads."""

    copies_out: int = 0  # the most store descriptors that read one byte of a (layer, block) of the group (0: a byte
    copies_in: int = 0  # was never read); the same for the load's writes


@dataclass(frozen=True)
class VllmRoundtrip:
    model: str
    vllm_version: str
    kv_cache_dtype: str
    injected: str | None
    expected_red: list[str]
    rows: list[VllmRow]
    ledger: list[GroupCopy]
    shims: list[dict[str, str]]
    elapsed_s: float
    layers_per_group: int | None = None  # the reduction: at most this many layers of each group moved (None: all)
    failing: list[str] = field(default_factory=list)
    window_hits: list[swa.WindowHit] = field(default_factory=list)  # each SWA group's hit, served by vLLM's manager

    @property
    def ok(self) -> bool:
        return not self.failing

    @property
    def inject_matched(self) -> bool | None:
        return None if self.injected is None else set(self.failing) == set(self.expected_red)


@dataclass(frozen=True)
class PageBytes:
    """A set of one page's bytes: LENGTH bytes at START, then again every PERIOD bytes, COUNT times in all."""

    start: int
    length: int
    period: int = 0
    count: int = 1

    @property
    def size(self) -> int:
        return self.length * self.count

    def runs(self) -> list[tuple[int, int]]:
        """Its (offset, length) runs in page order."""
        return [(self.start + i * self.period, self.length) for i in range(self.count)]

    def mask(self, page: int) -> Any:
        """A boolean numpy mask over the page's PAGE bytes."""
        np = rt.load("numpy")
        span = self.count * max(self.period, self.length)
        mask = np.zeros(max(page, self.start + span), dtype=bool)  # room for the last period's tail
        mask[self.start : self.start + span].reshape(self.count, -1)[:, : self.length] = True
        return mask[:page]


def _components(spec: Any) -> list[tuple[str, PageBytes]]:
    """One block's page as named byte sets, in page order. The attention pages of the backends the specs are built
    for (:func:`~kvdoctor.engines.vllm.inspect.attention_backend`: FLASH_ATTN, the CUDA default, and TRITON_ATTN) are
    whole (head, slot) cells of ``state_content_size_bytes``: plain ``[K | V]`` (both read it as
    ``kv_cache.transpose(1, 2).split(head_size, -1)``; so do FlashInfer but for nvfp4, and flex), per-token-head
    ``[K | K_scale | V | V_scale]`` (each half ends in its fp32 scale: ``_ensure_scale_caches``), one run of each per
    cell. Not every vLLM backend: ROCM_ATTN and B12X (``customize_spec``, ``num_head_slots=2``) lay all K, then all
    V, and are not modelled. A packed cell (nvfp4: data and scales interleaved per head slot) is not split; MLA is one
    latent; Mamba's states in the calculator's order; whatever follows is padding."""
    page = spec.page_size_bytes
    name = type(spec).__name__
    mode = getattr(spec, "kv_quant_mode", None)
    packed = getattr(spec, "state_content_bytes", None)
    parts: list[tuple[str, PageBytes]] = []
    if name.startswith("MLA"):  # before the quant modes: no MLA backend lists a per-token-head one
        parts = [("latent", PageBytes(0, spec.block_size * spec.num_kv_heads * spec.head_size * spec.dtype.itemsize))]
    elif mode is not None and mode.is_per_token_head:
        cells, half = spec.num_heads * spec.num_states, packed // 2
        scale = rt.load("torch").float32.itemsize  # _ensure_scale_caches: get_dtype_size(torch.float32)
        for side, at in (("k", 0), ("v", half)):
            parts.append((side, PageBytes(at, half - scale, packed, cells)))
            parts.append((f"{side}_scale", PageBytes(at + half - scale, scale, packed, cells)))
    elif packed is not None:
        parts = [("kv_packed", PageBytes(0, spec.num_heads * spec.num_states * packed))]
    elif name == "MambaSpec":
        labels = (
            ["conv_state", "ssm_state"] if len(spec.shapes) == 2 else [f"state{i}" for i in range(len(spec.shapes))]
        )
        at = 0
        for lab, shape, dtype in zip(labels, spec.shapes, spec.dtypes, strict=True):
            parts.append((lab, PageBytes(at, math.prod(shape) * dtype.itemsize)))
            at += parts[-1][1].size
    else:
        item = spec.dtype.itemsize
        k, v = spec.head_size * item, getattr(spec, "head_size_v", spec.head_size) * item
        cells = spec.num_heads * spec.num_states
        parts = [("k", PageBytes(0, k, k + v, cells)), ("v", PageBytes(k, v, k + v, cells))]
    used = sum(b.size for _, b in parts)
    if page > used:
        parts.append(("padding", PageBytes(used, page - used)))
    return parts


def _data_runs(spec: Any) -> list[tuple[int, int]]:
    """The page's runs without its scales, merged where adjacent (empty: the page keeps no scales)."""
    parts = _components(spec)
    if not any(n.endswith("_scale") for n, _ in parts):
        return []
    runs = sorted(r for n, b in parts if not n.endswith("_scale") for r in b.runs())
    merged: list[tuple[int, int]] = []
    for at, n in runs:
        if merged and sum(merged[-1]) == at:
            merged[-1] = (merged[-1][0], merged[-1][1] + n)
        else:
            merged.append((at, n))
    return merged


def _blocks_for(spec: Any, tokens: int) -> int:
    name = type(spec).__name__
    if name == "MambaSpec":
        return 1
    need = -(-tokens // spec.block_size)
    window = getattr(spec, "sliding_window", None)
    if window:  # window - 1 tokens plus any retained tail (SlidingWindowSpec.num_retained_tokens), one block of slack
        need = min(need, -(-getattr(spec, "num_retained_tokens", window - 1) // spec.block_size) + 1)
    return need


def _specs_and_groups(
    model: str, argv: Sequence[str], layers_cap: int | None, *, inject: str | None = None, retained: int = 0
) -> tuple[Any, list[Any], dict[str, Any]]:
    """vLLM's specs and KV-cache groups for the launch line; RETAINED (or swa-short-store's tail) is every sliding
    window's ``extra_retained_tokens``, set as vLLM's planning sets it for a multi-module MTP drafter
    (v1/core/kv_cache_planning.py:1636-1641)."""
    a = analyze_vllm(model, list(argv))
    if a.refusal is not None:
        raise InputError(f"vLLM refuses this launch line: {a.refusal}")
    mamba = mamba_state(a)
    specs = {n: vllm_spec(s, a.flags.kv_cache_dtype, mamba) for n, s in a.specs.layers.items()}
    windows = [s for s in specs.values() if type(s).__name__ == "SlidingWindowSpec"]
    tail = swa.retained_tail(
        [s.sliding_window for s in windows], min((s.block_size for s in windows), default=1), inject, retained
    )
    if tail:
        specs = {n: replace(s, extra_retained_tokens=tail) if s in windows else s for n, s in specs.items()}
    if mamba is not None:
        length = cache_config.vllm_max_model_len(a)
        mode, block = cache_config.mamba_cache(a, length)
        specs = {
            n: cache_config.with_mamba_cache(s, mode, block) if a.specs.layers[n].kind is SpecKind.MAMBA else s
            for n, s in specs.items()
        }
    planning = rt.load("vllm.v1.core.kv_cache_planning")
    groups = list(planning.get_kv_cache_groups(rt.planning_config(hybrid_manager=a.hybrid.enabled), dict(specs)))
    if layers_cap:
        for g in groups:
            g.layer_names = list(g.layer_names)[:layers_cap]
    return a, groups, specs


def _allocate(groups: list[Any], num_blocks: int, gen: Any) -> tuple[list[Any], list[list[Any]], list[list[int]]]:
    """One seeded random ``(num_blocks, page)`` int8 tensor per layer, vLLM's ref to each, and each group's tensor
    indices."""
    torch, base = rt.load("torch"), rt.load("vllm.v1.kv_offload.base")
    tensors: list[Any] = []
    refs: list[list[Any]] = []
    layer_of: list[list[int]] = []
    for g in groups:
        page = g.kv_cache_spec.page_size_bytes
        refs.append([])
        layer_of.append([])
        for _ in g.layer_names:
            layer_of[-1].append(len(tensors))
            refs[-1].append(base.CanonicalKVCacheRef(tensor_idx=len(tensors), page_size_bytes=page))
            tensors.append(torch.randint(-128, 128, (num_blocks, page), dtype=torch.int8, generator=gen))
    return tensors, refs, layer_of


def _block_ids(
    counts: list[int], num_blocks: int, gen: Any
) -> tuple[list[list[int]], list[list[int]], list[list[int]]]:
    """Per group: the request's block ids, the fresh ids it is loaded into, its host slots. Block 0 is vLLM's null
    block (``BlockPool.null_block``, v1/core/block_pool.py:191-192): never a request's, so null-source cannot read
    the request's own block."""
    torch = rt.load("torch")
    perm = (torch.randperm(num_blocks - 1, generator=gen) + 1).tolist()
    src_ids = [perm[:c] for c in counts]
    new_ids = [perm[c : 2 * c] for c in counts]
    starts = list(itertools.accumulate(counts, initial=0))
    return src_ids, new_ids, [list(range(a, a + c)) for a, c in zip(starts, counts, strict=False)]


def _preflight(
    model: str, argv: Sequence[str], layers: int | None, tokens: int, inject: str | None, retained: int
) -> tuple[Any, list[Any], list[str], list[swa.WindowHit]]:
    """vLLM's groups, the rows INJECT must turn red, each sliding-window group's hit: a fault that cannot apply
    (exit 2) and a run over the memory (exit 2) before allocating; a hit vLLM cannot serve is exit 3, with its
    message."""
    a, groups, _ = _specs_and_groups(model, argv, layers, inject=inject, retained=retained)
    expected_red = _expected_red(inject, groups, tokens)
    swa.check_tokens(groups, tokens, inject)
    _check_memory(groups, tokens)
    hits = swa.window_hits(groups, tokens, inject)
    if inject == swa.FAULT:  # the fault makes a hit unservable: reaching here means it did not fire (never a pass)
        raise InternalError(f"--inject {swa.FAULT}: vLLM served every sliding-window hit; the fault did not fire")
    return a, groups, expected_red, hits


@server_failures("roundtrip --engine vllm")  # vLLM's own code failing outside the worker: no verdict, exit 3
def run_vllm_roundtrip(
    model: str,
    argv: Sequence[str] = (),
    *,
    tokens: int = 256,
    seed: int = 0,
    inject: str | None = None,
    layers: int | None = 2,
    skip_shims: frozenset[str] = frozenset(),
    progress: Progress | None = None,
    extra_retained_tokens: int = 0,
) -> VllmRoundtrip:
    """Store one request's blocks of every group with vLLM's CPUOffloadingWorker, load them into fresh ids, diff
    (first each SWA group's hit from vLLM's CPU manager, ``window_hit``; EXTRA_RETAINED_TOKENS: an MTP's tail)."""
    check_fault(inject, server=Server.VLLM)
    report = progress or (lambda what, done, total: None)
    info = rt.engine_info()
    start = time.perf_counter()
    report("vLLM builds the specs and KV-cache groups", 0, 4)
    a, groups, expected_red, hits = _preflight(model, argv, layers, tokens, inject, extra_retained_tokens)
    torch = rt.load("torch")
    base = rt.load("vllm.v1.kv_offload.base")
    common = rt.load("vllm.v1.kv_offload.cpu.common")
    gw = rt.load(shims.GPU_WORKER)
    gen = torch.Generator().manual_seed(seed)
    counts = [_blocks_for(g.kv_cache_spec, tokens) for g in groups]
    tensors, refs, layer_of = _allocate(groups, 2 * max(counts) + 2, gen)
    src_ids, new_ids, slots = _block_ids(counts, tensors[0].shape[0], gen)
    originals = [t.clone() for t in tensors]

    flat = lambda ids: [b for group in ids for b in group]  # noqa: E731
    report(f"{WORKER} stores every group's blocks", 1, 4)
    with shims.applied(skip_shims) as copier:
        gpu = [t if "tensor reports is_cuda" in skip_shims else shims.reports_cuda(t) for t in tensors]
        caches = base.CanonicalKVCaches(
            tensors=[base.CanonicalKVCacheTensor(tensor=t, page_size_bytes=t.shape[1]) for t in gpu],
            group_data_refs=refs,
        )
        try:
            worker = gw.CPUOffloadingWorker(caches, blocks_per_chunk=1, num_cpu_chunks=max(sum(counts), 1))
            _inject(inject, worker, groups)
            store_src = base.GPULoadStoreSpec(flat(src_ids), counts, [0] * len(counts))
            worker.submit_store(1, store_src, common.CPULoadStoreSpec(flat(slots)))
            worker.wait({1})
            stored = len(copier.calls)
            report(f"{WORKER} loads them into fresh blocks", 2, 4)
            load_ids = [list(ids) for ids in new_ids]
            if inject == "reorder-blocks":
                r = _reorder_group(groups, tokens)
                load_ids[r][0], load_ids[r][1] = load_ids[r][1], load_ids[r][0]
            worker.submit_load(
                2,
                common.CPULoadStoreSpec(flat(slots)),
                base.GPULoadStoreSpec(flat(load_ids), counts, [0] * len(counts)),
            )
            worker.wait({2})
            worker.get_finished()
        except (AssertionError, AttributeError, NotImplementedError, RuntimeError, TypeError, ValueError) as exc:
            raise shims.refusal(exc, skip_shims) from None
    report("diff every group's components", 3, 4)
    moved = _Moved(tensors, copier.calls, stored)
    tallies = _tallies(groups, layer_of, src_ids, new_ids, moved)  # coverage once per (layer, block), both ways
    rows = _diff(groups, layer_of, originals, tensors, src_ids, new_ids, tallies)
    ledger = _ledger(groups, layer_of, src_ids, slots, new_ids, moved, tallies)
    failing = [r.name for r in rows if not r.ok] + [f"g{c.group}.ledger" for c in ledger if not c.ledger_ok]
    report("done", 4, 4)
    return VllmRoundtrip(
        model=model,
        vllm_version=info.version,
        kv_cache_dtype=a.flags.kv_cache_dtype,
        injected=inject,
        expected_red=expected_red,
        rows=rows,
        ledger=ledger,
        shims=[{"name": s.name, "why": s.why} for s in shims.SHIMS if s.name not in skip_shims],
        elapsed_s=round(time.perf_counter() - start, 3),
        layers_per_group=layers,
        failing=failing,
        window_hits=hits,
    )


def _reorder_group(groups: list[Any], tokens: int) -> int:
    """The first group that moves at least two blocks (the one reorder-blocks swaps two fresh ids in)."""
    target = next((i for i, g in enumerate(groups) if _blocks_for(g.kv_cache_spec, tokens) >= 2), None)
    if target is None:
        raise InputError("--inject reorder-blocks needs a group that moves at least two blocks (raise --tokens)")
    return target


def _mamba_groups(groups: list[Any]) -> list[int]:
    """The groups of Mamba state (one state block per request each)."""
    return [i for i, g in enumerate(groups) if type(g.kv_cache_spec).__name__ == "MambaSpec"]


def _scaled_groups(groups: list[Any], fault: str) -> list[int]:
    """The groups whose pages carry in-page scales (exit 2 naming FAULT when there is none)."""
    scaled = [i for i, g in enumerate(groups) if _data_runs(g.kv_cache_spec)]
    if not scaled:
        raise InputError(
            f"--inject {fault}: no group of this launch line carries in-page scales "
            "(try --kv-cache-dtype fp8_per_token_head, int8_per_token_head or int4_per_token_head)"
        )
    return scaled


def _every_component(groups: list[Any], chosen: list[int]) -> list[str]:
    return [f"g{i}.{c}" for i in chosen for c, _ in _components(groups[i].kv_cache_spec)]


def _expected_red(inject: str | None, groups: list[Any], tokens: int) -> list[str]:
    """The rows INJECT must turn red (exit 2 when it cannot change anything on these groups)."""
    if inject is None:
        return []
    last = len(groups) - 1
    if inject == "drop-group":
        return [*_every_component(groups, [last]), f"g{last}.ledger"]
    if inject == "reorder-blocks":
        return _every_component(groups, [_reorder_group(groups, tokens)])
    if inject == "null-source":  # every byte moves (the ledger is green); the Mamba state is the null block's
        mamba = _mamba_groups(groups)
        if not mamba:
            raise InputError(
                "--inject null-source: no KV-cache group of this launch line holds Mamba state "
                "(the fault stores the null block in place of a Mamba group's block; try nemotron-h-8b "
                "or granite-4.0-h-small)"
            )
        return _every_component(groups, mamba)
    if inject == "mis-stride":  # every page lands at the un-widened stride: every byte of the group is wrong
        return _every_component(groups, _scaled_groups(groups, inject))
    if inject == "swa-short-store":  # loud, no row: vLLM's CPU manager refuses the hit's load (exit 3)
        return []
    if inject == "skip-scales":
        return [f"g{i}.{c}" for i in _scaled_groups(groups, inject) for c in ("k_scale", "v_scale", "ledger")]
    raise InternalError(f"--inject {inject}: no round-trip fault of vLLM's offloading worker has this name")


def _inject(inject: str | None, worker: Any, groups: list[Any]) -> None:
    """Wrap vLLM's store handler (or, for mis-stride, its load handler) for the descriptor faults (reorder-blocks
    acts on the load spec instead)."""
    wrap = {
        "drop-group": _drop_group,
        "skip-scales": _skip_scales,
        "null-source": _null_source,
        "mis-stride": _mis_stride,
    }.get(inject or "")
    if wrap is not None:
        wrap(worker, groups)


def _drop_group(worker: Any, groups: list[Any]) -> None:
    """The store handler fills no descriptor for the last group."""
    handler = worker._store_handler
    fill: Callable[..., tuple[int, int]] = handler._fill_group_ops
    last = len(groups) - 1

    def dropping(g_idx: int, **kw: Any) -> tuple[int, int]:
        return (kw["op_idx"], 0) if g_idx == last else fill(g_idx, **kw)

    handler._fill_group_ops = dropping


def _skip_scales(worker: Any, groups: list[Any]) -> None:
    """The store handler splits each page-sized descriptor of a scaled group into its data runs (no scale byte)."""
    np = rt.load("numpy")
    handler = worker._store_handler
    fill: Callable[..., tuple[int, int]] = handler._fill_group_ops
    runs = {i: _data_runs(g.kv_cache_spec) for i, g in enumerate(groups)}
    widest = max(len(r) for r in runs.values())
    estimate: Callable[..., int] = handler._estimate_max_copy_ops

    def room(group_sizes: Sequence[int]) -> int:  # the descriptor buffers, sized for the split pages
        return estimate(group_sizes) * max(widest, 1)

    def unscaled(g_idx: int, **kw: Any) -> tuple[int, int]:
        first = kw["op_idx"]
        end, moved = fill(g_idx, **kw)
        if not runs[g_idx]:
            return end, moved
        page = groups[g_idx].kv_cache_spec.page_size_bytes
        sizes = kw["all_sizes"][first:end]
        if (sizes != page).any():
            raise InternalError(f"skip-scales: vLLM's descriptors of group {g_idx} are not whole pages")
        offsets = np.array([at for at, _ in runs[g_idx]], dtype=np.int64)
        lengths = np.array([n for _, n in runs[g_idx]], dtype=np.int64)
        src, dst = kw["all_src"][first:end].copy(), kw["all_dst"][first:end].copy()
        last = first + (end - first) * len(offsets)
        kw["all_src"][first:last] = (src[:, None] + offsets).ravel()
        kw["all_dst"][first:last] = (dst[:, None] + offsets).ravel()
        kw["all_sizes"][first:last] = np.tile(lengths, end - first)
        return last, int(lengths.sum()) * (end - first)

    handler._estimate_max_copy_ops = room
    handler._fill_group_ops = unscaled


def _null_source(worker: Any, groups: list[Any]) -> None:
    """vllm#53084: the store resolves a Mamba group's block positionally and reads vLLM's null block (block 0,
    ``NULL_BLOCK_ID``) in place of the request's own: vLLM's handler fills its descriptors from block ids of 0."""
    np = rt.load("numpy")
    handler = worker._store_handler
    fill: Callable[..., tuple[int, int]] = handler._fill_group_ops
    mamba = set(_mamba_groups(groups))

    def nulled(g_idx: int, **kw: Any) -> tuple[int, int]:
        if g_idx in mamba:
            kw["group_src"] = np.zeros_like(kw["group_src"])
        return fill(g_idx, **kw)

    handler._fill_group_ops = nulled


def _mis_stride(worker: Any, groups: list[Any]) -> None:
    """kvcached#424: the load side places each page of a scaled group at the un-widened stride (the page without
    its inline fp32 scales, as ``get_kv_cache_shape`` gave it when ``cache_dtype_str`` was not passed): vLLM's
    load descriptors are rebased from ``block * page`` to ``block * (page - scale bytes)``, each still a whole
    page."""
    handler = worker._load_handler
    fill: Callable[..., tuple[int, int]] = handler._fill_group_ops
    narrow = {i: _unwidened_page(groups[i].kv_cache_spec) for i in _scaled_groups(groups, "mis-stride")}

    def strided(g_idx: int, **kw: Any) -> tuple[int, int]:
        first = kw["op_idx"]
        end, moved = fill(g_idx, **kw)
        if g_idx not in narrow:
            return end, moved
        page, size = groups[g_idx].kv_cache_spec.page_size_bytes, kw["group_size"]
        dst = kw["all_dst"]
        for k, ref in enumerate(handler.layer_refs_per_group[g_idx]):  # _fill_direct_ops: group_size per layer
            base = handler.dst_tensors[ref.tensor_idx].data_ptr()
            at = slice(first + k * size, first + (k + 1) * size)
            block, rest = divmod(dst[at] - base, page)
            if (rest != 0).any() or (block < 0).any():
                raise InternalError(f"mis-stride: vLLM's load descriptors of group {g_idx} are not whole pages")
            dst[at] = base + block * narrow[g_idx]
        return end, moved

    handler._fill_group_ops = strided


def _unwidened_page(spec: Any) -> int:
    """The page's bytes without its inline scales: the stride of a KV tensor shaped with the bare head size."""
    return spec.page_size_bytes - sum(b.size for n, b in _components(spec) if n.endswith("_scale"))


Tally = tuple[int, int]  # (bytes covered, counting a byte covered twice twice; the most descriptors over one byte)


class _Moved:
    """What vLLM's descriptors moved, per tensor, block and byte range of the page: the store's reads (their
    sources) and the load's writes (their destinations), as the memmove shim recorded them."""

    def __init__(self, tensors: list[Any], calls: list[Any], stored: int) -> None:
        self._spans = sorted((x.data_ptr(), x.data_ptr() + x.numel(), x.shape[1], i) for i, x in enumerate(tensors))
        self._starts = [lo for lo, *_ in self._spans]
        self.bytes_out: dict[int, int] = {}  # tensor -> bytes its store descriptors read
        self.bytes_in: dict[int, int] = {}  # ... and its load descriptors wrote
        self.out = self._pieces([c.src for c in calls[:stored]], [c.size for c in calls[:stored]], self.bytes_out)
        self.into = self._pieces([c.dst for c in calls[stored:]], [c.size for c in calls[stored:]], self.bytes_in)

    def owner(self, ptr: int) -> tuple[int, int, int] | None:
        """(tensor index, tensor start, page bytes) of the tensor PTR points into, or None."""
        k = bisect.bisect_right(self._starts, ptr) - 1
        if k < 0 or ptr >= self._spans[k][1]:
            return None
        lo, _, page, t = self._spans[k]
        return t, lo, page

    def _pieces(self, ptrs: list[int], sizes: list[int], moved: dict[int, int]) -> dict[tuple[int, int], Any]:
        """(tensor, block) -> the (start, end) page offsets the descriptors at PTRS (of SIZES bytes) covered there,
        an int64 array sorted by start (a descriptor that spans blocks is one piece per block); MOVED gets each
        tensor's bytes."""
        np = rt.load("numpy")
        if not ptrs:
            return {}
        ptr, size = np.array(ptrs, dtype=np.uint64).astype(np.int64), np.array(sizes, dtype=np.int64)
        lo = np.array([x[0] for x in self._spans], dtype=np.uint64).astype(np.int64)
        hi = np.array([x[1] for x in self._spans], dtype=np.uint64).astype(np.int64)
        pages = np.array([x[2] for x in self._spans], dtype=np.int64)
        k = np.searchsorted(lo, ptr, side="right") - 1
        keep = (k >= 0) & (ptr < hi[np.maximum(k, 0)])  # descriptors into kvdoctor's tensors (not the host's)
        k, ptr, size = k[keep], ptr[keep], size[keep]
        tensor = np.array([x[3] for x in self._spans], dtype=np.int64)[k]
        totals = np.zeros(len(self._spans), dtype=np.int64)
        np.add.at(totals, tensor, size)
        moved.update({t: int(n) for t, n in enumerate(totals.tolist()) if n})
        page = pages[k]
        at, end = ptr - lo[k], ptr - lo[k] + size
        block, first = np.divmod(at, page)
        spans = (end - 1) // page - block + 1  # the blocks each descriptor touches
        if (spans > 1).any():  # split the spanning ones: one piece per block
            reps = spans
            idx = np.repeat(np.arange(len(at)), reps)
            step = np.arange(len(idx)) - np.repeat(np.cumsum(reps) - reps, reps)
            tensor, page, at, end = tensor[idx], page[idx], at[idx], end[idx]
            block = block[idx] + step
            first = np.maximum(at, block * page) - block * page
            last = np.minimum(end, (block + 1) * page) - block * page
        else:
            last = first + size
        order = np.lexsort((first, block, tensor))
        tensor, block, first, last = tensor[order], block[order], first[order], last[order]
        cuts = np.flatnonzero((np.diff(tensor) != 0) | (np.diff(block) != 0)) + 1
        bounds = [0, *cuts.tolist(), len(tensor)]
        pairs = np.stack([first, last], axis=1)
        return {(int(tensor[a]), int(block[a])): pairs[a:b] for a, b in itertools.pairwise(bounds)}

    @staticmethod
    def tally(
        pieces: dict[tuple[int, int], Any],
        layers: list[int],
        blocks: list[int],
        page: int,
        parts: list[PageBytes],
    ) -> list[Tally]:
        """Per byte set of the page: the bytes of it the descriptors covered over LAYERS x BLOCKS (a byte covered
        twice counts twice), and the most descriptors that covered one of its bytes (0 when one of its bytes was
        never covered). Each (layer, block)'s coverage is computed once, as constant-count segments from the
        descriptors' intervals, and met with each byte set by its period arithmetic (:func:`_overlaps`); (layer,
        block)s the descriptors covered alike are computed once."""
        np = rt.load("numpy")
        none = np.zeros((0, 2), dtype=np.int64)
        seen: dict[bytes, tuple[Any, int]] = {}  # descriptor pattern -> its pieces, how many (layer, block)s had it
        for t in layers:
            for b in blocks:
                spans = pieces.get((t, b), none)
                key = spans.tobytes()
                seen[key] = (spans, seen[key][1] + 1 if key in seen else 1)
        total, most, least = [0] * len(parts), [0] * len(parts), [-1] * len(parts)
        for spans, times in seen.values():
            for i, (covered, top, low) in enumerate(_overlaps(_segments(spans, page), parts)):
                total[i] += covered * times
                most[i] = max(most[i], top)
                least[i] = low if least[i] < 0 else min(least[i], low)
        return [(tot, 0 if low == 0 else top) for tot, top, low in zip(total, most, least, strict=True)]


def _segments(spans: Any, page: int) -> tuple[Any, Any, Any]:
    """SPANS (an (n, 2) array of descriptor (start, end) page offsets, possibly overlapping) as the page's
    constant-count segments: arrays of starts, ends and how many descriptors cover each; together they tile
    [0, PAGE)."""
    np = rt.load("numpy")
    cuts = np.union1d(spans.ravel(), np.array([0, page], dtype=np.int64))
    steps = np.zeros(len(cuts), dtype=np.int64)  # +1 where a descriptor starts, -1 where one ends
    np.add.at(steps, np.searchsorted(cuts, spans[:, 0]), 1)
    np.add.at(steps, np.searchsorted(cuts, spans[:, 1]), -1)
    return cuts[:-1], cuts[1:], np.cumsum(steps)[:-1]


def _overlaps(segments: tuple[Any, Any, Any], parts: list[PageBytes]) -> list[tuple[int, int, int]]:
    """Per byte set: (its bytes covered, counted per descriptor; the most and the fewest descriptors over one of its
    bytes), from the byte set's start, length, period and count: no page-sized arrays."""
    starts, ends, count = segments
    found = []
    for part in parts:
        inside = _below(part, ends) - _below(part, starts)  # the part's bytes in each segment
        hit = inside > 0
        if not hit.any():  # an empty byte set
            found.append((0, 0, 0))
            continue
        found.append((int((inside * count).sum()), int(count[hit].max()), int(count[hit].min())))
    return found


def _below(part: PageBytes, x: Any) -> Any:
    """How many of PART's bytes lie below each offset in X (an int64 array)."""
    np = rt.load("numpy")
    y = np.maximum(x - part.start, 0)
    if part.count == 1:
        return np.minimum(y, part.length)
    full, rest = np.divmod(y, part.period)
    return np.where(full >= part.count, part.size, full * part.length + np.minimum(rest, part.length))


def _check_memory(groups: list[Any], tokens: int) -> None:
    """Exit 2 before allocating when the run's tensors (twice: the blocks and their copy) do not fit."""
    import psutil

    counts = [_blocks_for(g.kv_cache_spec, tokens) for g in groups]
    blocks = 2 * max(counts) + 2
    need = 2 * sum(blocks * g.kv_cache_spec.page_size_bytes * len(g.layer_names) for g in groups)
    have = psutil.virtual_memory().available
    if need > MEMORY_SHARE * have:
        raise InputError(
            f"--engine vllm: the round trip would allocate {need / 2**30:.1f} GiB "
            f"({blocks} blocks of every layer), over half the {have / 2**30:.1f} GiB available; "
            "lower --tokens or --layers"
        )


def _tallies(
    groups: list[Any], layer_of: list[list[int]], src: list[list[int]], new: list[list[int]], moved: _Moved
) -> list[tuple[list[Tally], list[Tally]]]:
    """Per group, out and in: the tally of each component, then of the whole page (the group's ledger row)."""
    found = []
    for gi, g in enumerate(groups):
        page = g.kv_cache_spec.page_size_bytes
        parts = [b for _, b in _components(g.kv_cache_spec)] + [PageBytes(0, page)]
        found.append(
            (
                moved.tally(moved.out, layer_of[gi], src[gi], page, parts),
                moved.tally(moved.into, layer_of[gi], new[gi], page, parts),
            )
        )
    return found


def _per_block(differs: Any, part: PageBytes) -> Any:
    """The differing bytes of PART in each row (block) of DIFFERS (blocks x page bools), by PART's period: views,
    no gather."""
    if part.count == 1:
        return differs[:, part.start : part.start + part.length].sum(dim=1)
    whole = part.count - 1  # every run but the last as (count - 1, period) rows; the last on its own
    body = differs[:, part.start : part.start + whole * part.period].reshape(-1, whole, part.period)
    last = part.start + whole * part.period
    return body[:, :, : part.length].sum(dim=(1, 2)) + differs[:, last : last + part.length].sum(dim=1)


def _diff(
    groups: list[Any],
    layer_of: list[list[int]],
    before: list[Any],
    after: list[Any],
    src: list[list[int]],
    new: list[list[int]],
    tallies: list[tuple[list[Tally], list[Tally]]],
) -> list[VllmRow]:
    rows: list[VllmRow] = []
    for gi, g in enumerate(groups):
        parts = _components(g.kv_cache_spec)
        outs, intos = tallies[gi]
        bad = [0] * len(parts)
        first: list[tuple[int, str, int] | None] = [None] * len(parts)
        for li, t in enumerate(layer_of[gi]):
            differs = before[t][src[gi]] != after[t].as_subclass(type(before[t]))[new[gi]]  # once per layer
            for i, (_, part) in enumerate(parts):
                blocks = _per_block(differs, part)
                n = int(blocks.sum())
                if n and first[i] is None:
                    first[i] = (li, list(g.layer_names)[li], new[gi][int(blocks.nonzero()[0, 0])])
                bad[i] += n
        for i, (comp, part) in enumerate(parts):
            (out, copies_out), (into, copies_in), where = outs[i], intos[i], first[i]
            rows.append(
                VllmRow(
                    f"g{gi}.{comp}",
                    gi,
                    comp,
                    part.size * len(src[gi]) * len(layer_of[gi]),
                    bad[i],
                    bad[i] == 0,
                    bytes_out=out,
                    bytes_in=into,
                    copies_out=copies_out,
                    copies_in=copies_in,
                    first_layer=where[0] if where else None,
                    first_layer_name=where[1] if where else None,
                    first_block=where[2] if where else None,
                )
            )
    return rows


def _ledger(
    groups: list[Any],
    layer_of: list[list[int]],
    src: list[list[int]],
    slots: list[list[int]],
    new: list[list[int]],
    moved: _Moved,
    tallies: list[tuple[list[Tally], list[Tally]]],
) -> list[GroupCopy]:
    out: list[GroupCopy] = []
    for gi, g in enumerate(groups):
        page = g.kv_cache_spec.page_size_bytes
        bytes_out = sum(moved.bytes_out.get(t, 0) for t in layer_of[gi])
        bytes_in = sum(moved.bytes_in.get(t, 0) for t in layer_of[gi])
        expected = len(src[gi]) * len(layer_of[gi]) * page
        (_, copies_out), (_, copies_in) = tallies[gi][0][-1], tallies[gi][1][-1]  # the whole page
        out.append(
            GroupCopy(
                group=gi,
                spec=type(g.kv_cache_spec).__name__,
                layers=len(layer_of[gi]),
                page_bytes=page,
                block_ids=src[gi],
                host_slots=slots[gi],
                new_block_ids=new[gi],
                bytes_out=bytes_out,
                bytes_in=bytes_in,
                expected_bytes=expected,
                ledger_ok=bytes_out == expected == bytes_in,
                copies_out=copies_out,
                copies_in=copies_in,
            )
        )
    return out


# ---- the one result every reporter reads ---------------------------------------------------------------


def roundtrip_result(run: VllmRoundtrip, engine: EngineRef, *, tokens: int, seed: int) -> RoundtripResult:
    """RUN as the round trip's one typed result: a row per group component, then each group's ledger row."""
    rows: list[ComponentCheck] = []
    for copy in run.ledger:
        for row in (r for r in run.rows if r.group == copy.group):
            rows.append(
                ComponentCheck(
                    name=row.name,
                    bytes=row.bytes,
                    mismatched_bytes=row.mismatched_bytes,
                    equal=row.equal,
                    copies_out=row.copies_out,
                    copies_in=row.copies_in,
                    bytes_out=row.bytes_out,
                    bytes_in=row.bytes_in,
                    ledger_ok=row.ledger_ok,
                    first_request=None if row.equal else 0,
                    first_plane=row.first_layer_name,
                    first_layer=row.first_layer,
                    first_position=None,
                    first_slot=row.first_block,
                    ok=row.ok,
                )
            )
        short = max(abs(copy.expected_bytes - copy.bytes_out), abs(copy.expected_bytes - copy.bytes_in))
        rows.append(
            ComponentCheck(
                name=f"g{copy.group}.ledger",
                bytes=copy.expected_bytes,
                mismatched_bytes=short,
                equal=copy.ledger_ok,
                copies_out=copy.copies_out,
                copies_in=copy.copies_in,
                bytes_out=copy.bytes_out,
                bytes_in=copy.bytes_in,
                ledger_ok=copy.ledger_ok,
                first_request=None,
                first_plane=None,
                first_layer=None,
                first_position=None,
                first_slot=None,
                ok=copy.ledger_ok,
            )
        )
    used = VllmUsed(
        model=run.model,
        engine="vllm",
        vllm_version=run.vllm_version,
        worker=WORKER,
        tokens=tokens,
        seed=seed,
        layers_per_group=run.layers_per_group,
        groups=[VllmGroup(**{f.name: getattr(c, f.name) for f in fields(VllmGroup)}) for c in run.ledger],
        shims=run.shims,
    )
    result = RoundtripResult.of(
        device="cpu",
        kv_cache_dtype=run.kv_cache_dtype,
        backend=WORKER,
        injected=run.injected,
        components=rows,
        used=used,
        expected_red=run.expected_red,
        hazards=[],
        elapsed_s=run.elapsed_s,
        engine=engine,
    )
    if set(result.failing) != set(run.failing):  # one verdict: the rows and the engine's own list agree
        raise InternalError(f"the vLLM rows fail {result.failing}, the run {run.failing}")
    return result
