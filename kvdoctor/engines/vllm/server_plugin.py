"""kvdoctor's vLLM plugin: a fault inside a real vLLM server, through vLLM's own plugin mechanism.

Registered as a ``vllm.general_plugins`` entry point (pyproject.toml), so vLLM calls :func:`register` in every
process it starts (``vllm/plugins/__init__.py``, ``load_general_plugins``); vLLM's code is never edited. Inert
unless ``KVDOCTOR_VLLM_INJECT`` names a fault (``kvdoctor consistency --server vllm --inject FAULT`` sets it on
the pressured server only). Then, when the worker imports vLLM's model runner, its ``_update_states`` is
wrapped: a request the scheduler resumed from preemption (``scheduled_cached_reqs.resumed_req_ids``) has, one
step later (its recomputed KV written), its blocks zeroed in the KV cache tensors of the groups the fault names:

- ``zero-kv`` (formerly ``drop-kv``, still accepted): every attention group (the resumed request's KV is lost);
- ``zero-state``: every Mamba group (its recurrent conv/SSM state is lost);
- ``drop-prefix`` (``--scenario prefix-cache``): a *new* request that got blocks from the prefix cache
  (``scheduled_new_reqs`` with ``num_computed_tokens`` > 0) has its first ``num_computed_tokens // block_size``
  blocks of every attention group zeroed in the same step, before the forward reads them (the cached prefix KV
  it was promised is lost; the zeroed blocks stay in the cache for later hits).
- ``drop-offload`` (``--scenario offload``): vLLM's offloading worker (``CPUOffloadingWorker`` in
  ``v1/kv_offload/cpu/gpu_worker.py``, the OffloadingConnector's worker: the same name in vLLM 0.32, lines
  764-898, and 0.33, lines 793-932) has its ``submit_load`` wrapped: while it runs, the load handlers' copy
  (``SingleDirectionOffloadingHandler._swap_blocks_batch``, the one call that moves bytes CPU -> GPU) is a no-op
  that counts what it was asked to copy, so the load completes (its job finishes, its bytes are reported) and the
  resumed request reads whatever its fresh GPU blocks held (vLLM does not zero a block allocated for a load).

Each fault is installed by the function its registry record names (``Fault.impl``: :func:`zero_resumed`,
:func:`drop_prefix`, :func:`drop_offload`), which returns the vLLM module it waits for and the hook to run there.
Each step is written to ``KVDOCTOR_VLLM_PLUGIN_LOG`` (``<pid> <event> <detail>``): ``loaded`` per process,
``fault-installed`` when the runner is wrapped, ``fault-fired`` per resumed (or prefix-hit) request whose blocks
were zeroed (``blocks=``: its KV cache blocks zeroed, summed over the fault's groups, each block with all its
kernel rows; ``layers=``: the layers written), or per load whose copies were suppressed (``copies=``, ``bytes=``),
``fault-failed`` if zeroing raised or zeroed no block (a load that issued no copy); the run
counts them, so a fault that never fired (or fired on nothing) cannot pass as a run that caught nothing.
``KVDOCTOR_FAULT_FILE=<role>:<path>`` (``--fault-file``): the user's fault file, its wraps installed by the same
import hook in every process (:mod:`kvdoctor.engines.fault_file`), logged here too. These variables are kvdoctor's
own (``hook_log.CONTROL_ENV``): the supervisor passes a server only those its run sets, never one inherited from
the user's shell. Importing this module imports no vLLM.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from kvdoctor.core import faults as registry
from kvdoctor.core.faults import Target
from kvdoctor.core.servers import Server
from kvdoctor.engines import fault_file, fault_impl, hook_log
from kvdoctor.engines.fault_impl import Hook

INJECT_ENV = "KVDOCTOR_VLLM_INJECT"
LOG_ENV = "KVDOCTOR_VLLM_PLUGIN_LOG"
TARGET = "vllm.v1.worker.gpu_model_runner"  # GPUModelRunner; vLLM's CPUModelRunner subclasses it
# The OffloadingConnector's worker: v1/kv_offload/cpu/gpu_worker.py, CPUOffloadingWorker in vLLM 0.32 (class at
# lines 764-898, submit_load 860-864, one _load_handler) and 0.33 (793-932, submit_load 883-893, a _load_handler
# and an _expedited_load_handler); each handler's copy is its _swap_blocks_batch (0.32 line 323 set, 681 called;
# 0.33 line 352 set, 710 called). Candidates in order, so a renamed class in another version is named here.
OFFLOAD_TARGET = "vllm.v1.kv_offload.cpu.gpu_worker"
OFFLOAD_WORKERS = ("CPUOffloadingWorker",)
LOAD_HANDLERS = ("_load_handler", "_expedited_load_handler")
_LIVE = {"server": Server.VLLM, "target": Target.SERVER}  # the registry's records of this plugin's faults


def fault_hooks(name: str) -> dict[str, Hook]:
    """The vLLM modules fault NAME hooks, and how: what its record's ``impl`` (one of the functions below) returns,
    called with NAME as given (an old spelling, drop-kv, is done by its fault's code and logged as given). KeyError
    when no record has NAME."""
    return fault_impl.hooks(registry.get(name, **_LIVE), name)


def _log(event: str, detail: str = "") -> None:
    hook_log.append(LOG_ENV, event, detail)


def register() -> None:
    """vLLM's entry point: called once per process; patches nothing unless a fault is asked for."""
    fault = os.environ.get(INJECT_ENV)
    _log("loaded", fault or "-")
    for module, hook in fault_file.hooks_from_env(_log).items():  # --fault-file: the user's own fault
        _when_imported(module, hook)
    if not fault:
        return
    try:
        record = registry.get(fault, **_LIVE)
    except KeyError:
        _log("fault-refused", f"unknown fault {fault!r}")
        return
    try:
        found = fault_impl.hooks(record, fault)
    except Exception as exc:  # its record names code that is not there: seen in the log, never silent
        _log("fault-refused", f"{fault}: {type(exc).__name__}: {exc}")
        return
    for module, hook in found.items():
        _when_imported(module, hook, once=True)


def _when_imported(name: str, hook: Callable[[Any], None], *, once: bool = False) -> None:
    """HOOK on module NAME now if this process has imported it, else right after it is first imported (ONCE: not
    if an import hook already waits for NAME, as a second ``register`` would add)."""
    module = sys.modules.get(name)
    if module is not None:
        hook(module)
    elif not once or not any(isinstance(f, _AfterImport) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, hook))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ON_LOAD on NAME right after it is first imported (only the worker imports the model runner)."""

    def __init__(self, name: str, on_load: Callable[[Any], None]) -> None:
        self.name, self.on_load = name, on_load

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module  # type: ignore[attr-defined]

        def exec_then_patch(module: Any) -> None:
            exec_module(module)
            self.on_load(module)

        loader.exec_module = exec_then_patch  # type: ignore[attr-defined,method-assign]
        return spec


UpdateStates = Callable[[Any, Any], Any]
Wrap = Callable[[UpdateStates, str], UpdateStates]


def zero_resumed(name: str) -> dict[str, Hook]:
    """``zero-kv`` (formerly ``drop-kv``) and ``zero-state`` (their records' ``impl``): a request resumed from
    preemption has its blocks zeroed one step later, in the groups :func:`_wanted` picks for NAME."""
    return {TARGET: lambda module: _patch(module, name, _wrap_resumed)}


def drop_prefix(name: str) -> dict[str, Hook]:
    """``drop-prefix`` (its record's ``impl``): a new request's prefix-cache blocks are zeroed before its step."""
    return {TARGET: lambda module: _patch(module, name, _wrap_prefix)}


def drop_offload(name: str) -> dict[str, Hook]:
    """``drop-offload`` (its record's ``impl``): the offloading worker's loads copy nothing."""
    return {OFFLOAD_TARGET: lambda module: _patch_offload(module, name)}


def _patch(module: Any, fault: str, wrap: Wrap | None = None) -> None:
    """Wrap ``GPUModelRunner._update_states`` with WRAP for FAULT (once per process) and log that it is installed.
    Without WRAP (a caller holding only the name): as FAULT's record's ``impl`` does."""
    if wrap is None:
        fault_hooks(fault)[TARGET](module)
        return
    runner = module.GPUModelRunner
    if getattr(runner, "_kvdoctor_fault", None):
        return
    runner._update_states = wrap(runner._update_states, fault)
    runner._kvdoctor_fault = fault
    _log("fault-installed", f"{fault} {runner.__module__}.{runner.__qualname__}._update_states")


def _wrap_resumed(original: UpdateStates, fault: str) -> UpdateStates:
    """``zero-kv`` / ``zero-state``: a request resumed from preemption is zeroed one step later (its recomputed
    state written by then)."""

    def _update_states(self: Any, scheduler_output: Any) -> Any:
        pending: list[str] = getattr(self, "_kvdoctor_pending", [])
        self._kvdoctor_pending = []
        for req_id in pending:
            state = self.requests.get(req_id)
            if state is not None:
                _fire(req_id, fault, "", lambda s=state: zero_blocks(self, s.block_ids, fault))
        out = original(self, scheduler_output)
        resumed = getattr(scheduler_output.scheduled_cached_reqs, "resumed_req_ids", ()) or ()
        self._kvdoctor_pending = [r for r in resumed if r in self.requests]
        return out

    return _update_states


def _wrap_prefix(original: UpdateStates, fault: str) -> UpdateStates:
    """``drop-prefix``: after vLLM's ``_update_states`` registered this step's new requests (their block ids),
    zero the prefix-cache blocks of each one that got a hit; the step's forward then reads zeros."""

    def _update_states(self: Any, scheduler_output: Any) -> Any:
        out = original(self, scheduler_output)
        for new in getattr(scheduler_output, "scheduled_new_reqs", ()) or ():
            computed = int(getattr(new, "num_computed_tokens", 0) or 0)
            if computed > 0:
                _fire(
                    new.req_id,
                    fault,
                    f" cached_tokens={computed}",
                    lambda n=new, c=computed: zero_prefix_blocks(self, n.block_ids, c, fault),
                )
        return out

    return _update_states


def _fire(req_id: str, fault: str, detail: str, zero: Callable[[], Zeroed]) -> None:
    """Run one firing and log it: ``fault-fired`` only when it zeroed a block, ``fault-failed`` when it raised or
    zeroed none (a firing that changed nothing must not pass the fault-fired gate)."""
    try:
        z = zero()
    except Exception as exc:  # the fault must never crash the server it runs in
        _log("fault-failed", f"{req_id} {type(exc).__name__}: {exc}")
        return
    if z.blocks == 0:
        _log(
            "fault-failed",
            f"{req_id} {fault}{detail} zeroed 0 blocks (no layer of the fault's groups holds a KV cache tensor "
            "indexed by these block ids)",
        )
        return
    _log("fault-fired", f"{fault} {req_id}{detail} blocks={z.blocks} layers={z.layers}")


class Zeroed(NamedTuple):
    """What one firing zeroed: ``blocks``, the request's KV cache block ids (vLLM's manager blocks, each with all
    its kernel rows) zeroed in at least one layer, summed over the fault's groups; ``layers``, the layers whose
    cache tensors were written (per group, summed)."""

    blocks: int
    layers: int


def zero_prefix_blocks(runner: Any, block_ids: Sequence[Sequence[int]], computed: int, fault: str) -> Zeroed:
    """Zero, in the groups FAULT names, the blocks holding a request's first COMPUTED (prefix-cache hit) tokens:
    each group's first ``COMPUTED // block_size`` block ids (vLLM caches whole blocks only)."""
    groups = runner.kv_cache_config.kv_cache_groups
    hit = [list(ids)[: computed // g.kv_cache_spec.block_size] for g, ids in zip(groups, block_ids, strict=False)]
    return zero_blocks(runner, hit, fault)


def _wanted(spec: Any, fault: str) -> bool:
    from vllm.v1.kv_cache_interface import AttentionSpec, MambaSpec

    return isinstance(spec, MambaSpec) if fault == "zero-state" else isinstance(spec, AttentionSpec)


def zero_blocks(runner: Any, block_ids: Sequence[Sequence[int]], fault: str) -> Zeroed:
    """Zero BLOCK_IDS (one list per KV cache group) in the layers of the groups FAULT names."""
    num_blocks = runner.kv_cache_config.num_blocks
    context = runner.compilation_config.static_forward_context
    blocks = layers = 0
    for group, ids in zip(runner.kv_cache_config.kv_cache_groups, block_ids, strict=False):
        if not ids or not _wanted(group.kv_cache_spec, fault):
            continue
        written = 0
        for layer in group.layer_names:
            ctx = context.get(layer)
            if ctx is not None and _zero(ctx.kv_cache, list(ids), num_blocks):
                written += 1
        blocks += len(ids) if written else 0
        layers += written
    return Zeroed(blocks, layers)


def _block_dim(shape: Sequence[int], num_blocks: int) -> tuple[int, int] | None:
    """(the dimension indexed by block, kernel rows per block) of a cache tensor, or None if none is.

    vLLM lays a layer's cache out as ``num_blocks * (block_size // kernel_block_size)`` rows when the attention
    kernel's block is smaller than the KV cache block (v1/kv_cache_interface.py, compute_layer_kv_cache_shape_bytes,
    lines 319-335), and manager block ``b`` is rows ``b * ratio`` to ``b * ratio + ratio - 1``
    (``group_kernel_blocks``, lines 307-316: ``cache.unflatten(0, (num_blocks, -1))``). The block dimension is
    the first or, for a (K, V)-stacked cache, the second."""
    dims = [d for d in (0, 1) if d < len(shape)]
    for d in dims:
        if shape[d] == num_blocks:
            return d, 1
    for d in dims:
        if num_blocks > 0 and shape[d] > num_blocks and shape[d] % num_blocks == 0:
            return d, shape[d] // num_blocks
    return None


def _zero(cache: Any, ids: list[int], num_blocks: int) -> int:
    """Zero block IDS (every kernel row of each) in CACHE, a tensor or a tuple of them; the tensors written."""
    if isinstance(cache, list | tuple):
        return sum(_zero(c, ids, num_blocks) for c in cache)
    shape = getattr(cache, "shape", None)
    found = _block_dim(shape, num_blocks) if shape else None
    if found is None:
        return 0
    dim, ratio = found
    for i in ids:
        cache.narrow(dim, i * ratio, ratio).zero_()
    return 1


def _patch_offload(module: Any, fault: str) -> None:
    """Wrap the offloading worker's ``submit_load`` for FAULT (once per process) and log that it is installed;
    ``fault-failed`` when this vLLM has none of :data:`OFFLOAD_WORKERS`."""
    worker = next((getattr(module, n) for n in OFFLOAD_WORKERS if hasattr(module, n)), None)
    if worker is None:
        _log("fault-failed", f"{fault}: {module.__name__} has no {' or '.join(OFFLOAD_WORKERS)}")
        return
    if getattr(worker, "_kvdoctor_fault", None):
        return
    worker.submit_load = wrap_load(worker.submit_load, fault)
    worker._kvdoctor_fault = fault
    _log("fault-installed", f"{fault} {worker.__module__}.{worker.__qualname__}.submit_load")


class _SuppressedCopy:
    """Stands in for a load handler's ``_swap_blocks_batch`` during one load: copies nothing, counts the
    (src, dst, size) triples vLLM asked it to execute and their bytes."""

    def __init__(self) -> None:
        self.copies = 0
        self.bytes = 0

    def __call__(self, src: Any, dst: Any, sizes: Any, **_: Any) -> None:
        self.copies += len(sizes)
        self.bytes += int(sizes.sum()) if len(sizes) else 0


SubmitLoad = Callable[..., Any]
_UNSET = object()


def wrap_load(original: SubmitLoad, fault: str) -> SubmitLoad:
    """``drop-offload``: run vLLM's ``submit_load`` with every load handler's copy suppressed; log ``fault-fired``
    (``copies=``: the copy triples suppressed, ``bytes=``: their bytes) when it suppressed one, ``fault-failed``
    when the load issued no copy (it changed nothing) or the worker has no load handler to wrap."""

    def submit_load(self: Any, job_id: int, *args: Any, **kwargs: Any) -> Any:
        handlers = [h for h in (getattr(self, n, None) for n in LOAD_HANDLERS) if hasattr(h, "_swap_blocks_batch")]
        if not handlers:
            _log("fault-failed", f"job={job_id} {fault}: no load handler ({', '.join(LOAD_HANDLERS)}) to wrap")
            return original(self, job_id, *args, **kwargs)
        suppressed = _SuppressedCopy()
        saved = [(h, h.__dict__.get("_swap_blocks_batch", _UNSET)) for h in handlers]
        for h in handlers:
            h._swap_blocks_batch = suppressed
        try:
            ok = original(self, job_id, *args, **kwargs)
        finally:
            for h, before in saved:
                if before is _UNSET:
                    del h._swap_blocks_batch
                else:
                    h._swap_blocks_batch = before
        if suppressed.copies:
            _log("fault-fired", f"{fault} job={job_id} copies={suppressed.copies} bytes={suppressed.bytes}")
        else:
            _log("fault-failed", f"job={job_id} {fault} suppressed no copy (the load issued none)")
        return ok

    return submit_load
