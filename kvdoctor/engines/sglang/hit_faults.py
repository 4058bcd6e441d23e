"""``--inject`` faults inside a SGLang server on a radix-cache hit (``kvdoctor consistency --scenario prefix-cache``).

A hybrid model's radix tree (SGLang 0.5.23, ``UnifiedRadixCache`` with its ``MambaComponent``) keeps one recurrent
state per cached node. A request that hits one is given a fresh slot and a copy-on-write source
(``MambaComponent.finalize_match_result_in_cache``, ``srt/mem_cache/unified_cache/components/mamba.py:196-227``:
``req.kv.mamba_cow_src_index``); the next extend batch collects every request's source and destination
(``ScheduleBatch._collect_deferred_mamba_cow_and_clear``, ``srt/managers/schedule_batch.py:3240-3260``) and the model
runner copies them before the forward (``srt/model_executor/model_runner.py:1934-1960``). That path is the same for
every hybrid (LFM2's ShortConv included), which is why these faults wrap it and not a model's backend:

- ``blank-state-on-hit`` (sglang#29368): the hit's copy-on-write becomes a clear, so the request runs its unique
  suffix from a zero state while its attention KV is the cached prefix's (the bug dropped the initial state);
- ``stale-state-on-hit`` (sglang#31474's generic form): the copy's source is a slot never written for this prefix
  (the previous hit's checkpoint of another prefix; at the first hit the request's own freshly allocated slot,
  whatever its last occupant left);
- ``unwritten-checkpoint`` (sglang#16053, sglang#29973): the state a running request donates to the tree at a
  checkpoint (``MambaComponent.prepare_for_caching_req``, ``mamba.py:604-681``, no_buffer: copied from the live slot
  into a new one) is never copied, so a later hit restores whatever the donated slot held.

Each fault checks :func:`kvdoctor.engines.arming.armed` at every firing (disarmed: SGLang's own code runs) and logs
``fault-fired <name> <detail>`` through the site hook's log, which the run counts (a fault that never fired is no
caught fault). Which faults exist, what each needs and replays, is the registry's (``HIT_FAULTS`` of
:mod:`kvdoctor.core.sglang.faults`); each record's ``impl`` names its function here, which returns the SGLang module
it wraps and the hook.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kvdoctor.engines import arming, hook_log

SCHEDULE_BATCH_MODULE = "sglang.srt.managers.schedule_batch"
MAMBA_MODULE = "sglang.srt.mem_cache.unified_cache.components.mamba"
BLANK = "blank-state-on-hit"
STALE = "stale-state-on-hit"
UNWRITTEN = "unwritten-checkpoint"
LOG_ENV = "KVDOCTOR_HOOK_LOG"  # the site hook's log (kvdoctor.engines.sglang.server_hooks.LOG_ENV)


def _log(event: str, detail: str) -> None:
    """One line of the site hook's log (``server_hooks.LOG_ENV``: its file, read back by the run)."""
    hook_log.append(LOG_ENV, event, detail)


def _where(req: Any) -> str:
    return f"rid={getattr(req, 'rid', '?')} cached={getattr(req, 'prefix_len', '?')}"


class Redirect:
    """What a copy-on-write fault does to the hit requests of one extend batch, before SGLang collects them. Pure
    on the requests' ``kv`` records (tensors of slot ids), so it is tested without a server."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.last_source: Any = None  # the previous hit's checkpoint slot (stale-state-on-hit's next source)

    def __call__(self, reqs: list[Any]) -> list[str]:
        """Change every hit in REQS (a request with a copy-on-write source); one detail line per change."""
        fired = []
        for req in reqs:
            kv = getattr(req, "kv", None)
            if kv is None or kv.mamba_cow_src_index is None:
                continue
            if self.name == BLANK:
                kv.mamba_cow_src_index = None
                kv.mamba_needs_clear = True  # SGLang zeroes the slot instead of copying the checkpoint
                fired.append(f"{_where(req)} copy-on-write -> clear")
            else:
                source = kv.mamba_cow_src_index
                stale = self._stale(source, kv.mamba_pool_idx)
                kv.mamba_cow_src_index = stale
                fired.append(f"{_where(req)} source slot {_ids(source)} -> {_ids(stale)}")
        return fired

    def _stale(self, source: Any, own: Any) -> Any:
        """A slot never written for SOURCE's prefix: the previous hit's (another prefix's) checkpoint, else the
        request's own new slot (its copy onto itself leaves the previous occupant's state)."""
        previous, self.last_source = self.last_source, source.clone()
        if previous is not None and _ids(previous) != _ids(source):
            return previous
        return own.reshape(1).clone()


def _ids(t: Any) -> list[int]:
    return [int(v) for v in t.reshape(-1).tolist()]


def _cow_hook(name: str) -> Callable[[ModuleType], None]:
    """Wrap ``ScheduleBatch._collect_deferred_mamba_cow_and_clear`` so each armed extend batch's hits are changed."""
    redirect = Redirect(name)

    def hook(module: ModuleType) -> None:
        batch = module.ScheduleBatch
        original = batch._collect_deferred_mamba_cow_and_clear

        @functools.wraps(original)
        def collect(self: Any, reqs: Any) -> Any:
            if arming.armed(name):
                for detail in redirect(list(reqs)):
                    _log("fault-fired", f"{name} {detail}")
            return original(self, reqs)

        batch._collect_deferred_mamba_cow_and_clear = collect
        _log("fault-installed", f"{name} on ScheduleBatch._collect_deferred_mamba_cow_and_clear")

    return hook


def _unwritten_hook(name: str) -> Callable[[ModuleType], None]:
    """Wrap ``MambaComponent.prepare_for_caching_req``: an armed, unfinished no_buffer checkpoint is donated
    without the copy of the live state into it."""

    def hook(module: ModuleType) -> None:
        component = module.MambaComponent
        original = component.prepare_for_caching_req

        @functools.wraps(original)
        def prepare(self: Any, req: Any, insert_params: Any, token_ids_len: int, is_finished: bool) -> Any:
            if is_finished or self.cache.enable_mamba_extra_buffer or not arming.armed(name):
                return original(self, req, insert_params, token_ids_len, is_finished)
            pool = self.cache.req_to_token_pool.mamba_pool
            copied: list[Any] = []
            pool.copy_from = lambda src, dst: copied.append(dst)  # instance attribute, removed below
            try:
                out = original(self, req, insert_params, token_ids_len, is_finished)
            finally:
                del pool.copy_from
            for dst in copied:
                _log("fault-fired", f"{name} {_where(req)} checkpoint slot {_ids(dst)} at {out} left unwritten")
            return out

        component.prepare_for_caching_req = prepare
        _log("fault-installed", f"{name} on MambaComponent.prepare_for_caching_req")

    return hook


def blank_state_on_hit(name: str) -> dict[str, Callable[[ModuleType], None]]:
    """``blank-state-on-hit``'s hook (its record's ``impl``): each armed hit's copy-on-write becomes a clear."""
    return {SCHEDULE_BATCH_MODULE: _cow_hook(name)}


def stale_state_on_hit(name: str) -> dict[str, Callable[[ModuleType], None]]:
    """``stale-state-on-hit``'s hook (its record's ``impl``): each armed hit copies from a slot never written for
    its prefix."""
    return {SCHEDULE_BATCH_MODULE: _cow_hook(name)}


def unwritten_checkpoint(name: str) -> dict[str, Callable[[ModuleType], None]]:
    """``unwritten-checkpoint``'s hook (its record's ``impl``): an armed checkpoint is donated without its copy."""
    return {MAMBA_MODULE: _unwritten_hook(name)}
