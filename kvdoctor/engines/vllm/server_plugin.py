"""kvdoctor's vLLM plugin: a fault inside a real vLLM server, through vLLM's own plugin mechanism.

Registered as a ``vllm.general_plugins`` entry point (pyproject.toml), so vLLM calls :func:`register` in every
process it starts (``vllm/plugins/__init__.py``, ``load_general_plugins``); vLLM's code is never edited. Inert
unless ``KVDOCTOR_VLLM_INJECT`` names a fault (``kvdoctor consistency --server vllm --inject FAULT`` sets it on
the pressured server only). Then, when the worker imports vLLM's model runner, its ``_update_states`` is
wrapped: a request the scheduler resumed from preemption (``scheduled_cached_reqs.resumed_req_ids``) has, one
step later (its recomputed KV written), its blocks zeroed in the KV cache tensors of the groups the fault names:

- ``drop-kv``: every attention group (the resumed request's KV is lost);
- ``zero-state``: every Mamba group (its recurrent conv/SSM state is lost);
- ``drop-prefix`` (``--scenario prefix-cache``): a *new* request that got blocks from the prefix cache
  (``scheduled_new_reqs`` with ``num_computed_tokens`` > 0) has its first ``num_computed_tokens // block_size``
  blocks of every attention group zeroed in the same step, before the forward reads them (the cached prefix KV
  it was promised is lost; the zeroed blocks stay in the cache for later hits).

Each step is written to ``KVDOCTOR_VLLM_PLUGIN_LOG`` (``<pid> <event> <detail>``): ``loaded`` per process,
``fault-installed`` when the runner is wrapped, ``fault-fired`` per resumed (or prefix-hit) request hit,
``fault-failed`` if zeroing raised; the run counts them, so a fault that never fired cannot pass as a run that
caught nothing. Importing this module imports no vLLM.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from kvdoctor.engines import hook_log

INJECT_ENV = "KVDOCTOR_VLLM_INJECT"
LOG_ENV = "KVDOCTOR_VLLM_PLUGIN_LOG"
TARGET = "vllm.v1.worker.gpu_model_runner"  # GPUModelRunner; vLLM's CPUModelRunner subclasses it
# name -> (needs recurrent state, what it does)
FAULTS: dict[str, tuple[bool, str]] = {
    "drop-kv": (False, "zeroes every attention KV block of a request resumed from preemption, one step later"),
    "zero-state": (True, "zeroes the recurrent (Mamba) state blocks of a request resumed from preemption"),
    "drop-prefix": (False, "zeroes the attention KV blocks a new request got from the prefix cache, before its step"),
}
PREFIX_FAULTS = ("drop-prefix",)  # faults on prefix-cache hits (--scenario prefix-cache); the rest on preemption


def _log(event: str, detail: str = "") -> None:
    hook_log.append(LOG_ENV, event, detail)


def register() -> None:
    """vLLM's entry point: called once per process; patches nothing unless a fault is asked for."""
    fault = os.environ.get(INJECT_ENV)
    _log("loaded", fault or "-")
    if not fault:
        return
    if fault not in FAULTS:
        _log("fault-refused", f"unknown fault {fault!r}")
        return
    module = sys.modules.get(TARGET)
    if module is not None:
        _patch(module, fault)
    elif not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(TARGET, lambda m: _patch(m, fault)))


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


def _patch(module: Any, fault: str) -> None:
    runner = module.GPUModelRunner
    if getattr(runner, "_kvdoctor_fault", None):
        return
    if fault in PREFIX_FAULTS:
        _patch_prefix(runner, fault)
        return
    original = runner._update_states

    def _update_states(self: Any, scheduler_output: Any) -> Any:
        pending: list[str] = getattr(self, "_kvdoctor_pending", [])
        self._kvdoctor_pending = []
        for req_id in pending:
            state = self.requests.get(req_id)
            if state is None:
                continue
            try:
                n = zero_blocks(self, state.block_ids, fault)
            except Exception as exc:  # the fault must never crash the server it runs in
                _log("fault-failed", f"{req_id} {type(exc).__name__}: {exc}")
                continue
            _log("fault-fired", f"{fault} {req_id} blocks={n}")
        out = original(self, scheduler_output)
        resumed = getattr(scheduler_output.scheduled_cached_reqs, "resumed_req_ids", ()) or ()
        self._kvdoctor_pending = [r for r in resumed if r in self.requests]
        return out

    runner._update_states = _update_states
    runner._kvdoctor_fault = fault
    _log("fault-installed", f"{fault} {runner.__module__}.{runner.__qualname__}._update_states")


def _patch_prefix(runner: Any, fault: str) -> None:
    """``drop-prefix``: after vLLM's ``_update_states`` registered this step's new requests (their block ids),
    zero the prefix-cache blocks of each one that got a hit; the step's forward then reads zeros."""
    original = runner._update_states

    def _update_states(self: Any, scheduler_output: Any) -> Any:
        out = original(self, scheduler_output)
        for new in getattr(scheduler_output, "scheduled_new_reqs", ()) or ():
            computed = int(getattr(new, "num_computed_tokens", 0) or 0)
            if computed <= 0:
                continue
            try:
                n = zero_prefix_blocks(self, new.block_ids, computed, fault)
            except Exception as exc:  # the fault must never crash the server it runs in
                _log("fault-failed", f"{new.req_id} {type(exc).__name__}: {exc}")
                continue
            _log("fault-fired", f"{fault} {new.req_id} cached_tokens={computed} blocks={n}")
        return out

    runner._update_states = _update_states
    runner._kvdoctor_fault = fault
    _log("fault-installed", f"{fault} {runner.__module__}.{runner.__qualname__}._update_states")


def zero_prefix_blocks(runner: Any, block_ids: Sequence[Sequence[int]], computed: int, fault: str) -> int:
    """Zero, in every attention group, the blocks holding a request's first COMPUTED (prefix-cache hit) tokens."""
    num_blocks = runner.kv_cache_config.num_blocks
    context = runner.compilation_config.static_forward_context
    zeroed = 0
    for group, ids in zip(runner.kv_cache_config.kv_cache_groups, block_ids, strict=False):
        spec = group.kv_cache_spec
        if not ids or not _wanted(spec, fault):
            continue
        hit = list(ids)[: computed // spec.block_size]
        for layer in group.layer_names:
            ctx = context.get(layer)
            if ctx is not None and hit:
                zeroed += _zero(ctx.kv_cache, hit, num_blocks)
    return zeroed


def _wanted(spec: Any, fault: str) -> bool:
    from vllm.v1.kv_cache_interface import AttentionSpec, MambaSpec

    return isinstance(spec, MambaSpec) if fault == "zero-state" else isinstance(spec, AttentionSpec)


def zero_blocks(runner: Any, block_ids: Sequence[Sequence[int]], fault: str) -> int:
    """Zero BLOCK_IDS (one list per KV cache group) in the layers of the groups FAULT names; blocks zeroed."""
    num_blocks = runner.kv_cache_config.num_blocks
    context = runner.compilation_config.static_forward_context
    zeroed = 0
    for group, ids in zip(runner.kv_cache_config.kv_cache_groups, block_ids, strict=False):
        if not ids or not _wanted(group.kv_cache_spec, fault):
            continue
        for layer in group.layer_names:
            ctx = context.get(layer)
            if ctx is not None:
                zeroed += _zero(ctx.kv_cache, list(ids), num_blocks)
    return zeroed


def _zero(cache: Any, ids: list[int], num_blocks: int) -> int:
    if isinstance(cache, list | tuple):
        return sum(_zero(c, ids, num_blocks) for c in cache)
    shape = getattr(cache, "shape", None)
    if not shape:
        return 0
    dim = 0 if shape[0] == num_blocks else 1 if len(shape) > 1 and shape[1] == num_blocks else None
    if dim is None:
        return 0
    for i in ids:
        cache.select(dim, i).zero_()
    return len(ids)
