"""``--inject`` faults inside a running SGLang decode server (``kvdoctor consistency``).

The round trip's faults (:mod:`kvdoctor.engines.sglang._faults`) wrap the pools of an
:class:`EnginePools` kvdoctor built itself. A live server builds its own pools, so here the same
wrappers are applied to the *server's* pool objects, found where SGLang hands them to a retraction:
``Req.offload_kv_cache(req_to_token_pool, token_to_kv_pool_allocator)``
(``srt/managers/schedule_batch.py:2109-2128``), which PD decode calls for every request it retracts
with a ``cpu_tensor`` backup. The first call installs the fault on those objects (instance attributes,
never an edit of SGLang's files); every later backup and restore runs through it.

One fault exists only here: ``drop-kv`` (the restore brings nothing of the full-attention KV back),
the KV counterpart of ``drop-swa`` for dense models, which have no recurrent state to lose. Which faults a live
server takes, what each does and needs, is the fault registry's (``kvdoctor.core.faults``, target ``consistency``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType, SimpleNamespace
from typing import Any

from kvdoctor._exceptions import InputError
from kvdoctor.core import faults as registry
from kvdoctor.core.faults import Needs, Target
from kvdoctor.core.servers import Server
from kvdoctor.engines import arming
from kvdoctor.engines.sglang.server_hooks import SCHEDULE_BATCH_MODULE, log

_LIVE = {"server": Server.SGLANG, "target": Target.SERVER}  # the registry's records of a live SGLang server's faults
# What a refused model lacks, in the server's terms. Not ``Needs.models`` ("sliding-window models"): a model can be
# one and still lack the state, since SGLang runs Gemma-2/3 without its SWA sub-pool (``consistency.runnable``).
NEEDS_TEXT = {
    Needs.RECURRENT: "recurrent (conv/temporal) state",
    Needs.SWA: "a sliding-window KV sub-pool",
    Needs.KV: "an attention KV pool",
}


def check(name: str, *, has_recurrent: bool, has_swa: bool) -> None:
    """Refuse (exit 2) a fault the model cannot show: it would pass green having changed nothing."""
    live = registry.names(**_LIVE)
    if name not in live:
        raise InputError(f"unknown fault '{name}' for a live server; choose one of {', '.join(live)}")
    need = registry.get(name, **_LIVE).needs
    have = {Needs.RECURRENT: has_recurrent, Needs.SWA: has_swa, Needs.KV: True, Needs.ANY: True}[need]
    if not have:
        raise InputError(f"--inject {name} needs {NEEDS_TEXT[need]}; this model has none")


def live_pools(req_to_token_pool: Any, allocator: Any) -> SimpleNamespace:
    """The server's pools in the shape :mod:`._faults` reads (``kv_pool``, ``mamba_pool``, ``sub_pools``)."""
    kv = allocator.get_kvcache()
    sub_pools = {"full": getattr(kv, "full_kv_pool", kv)}
    if getattr(kv, "swa_kv_pool", None) is not None:
        sub_pools["swa"] = kv.swa_kv_pool
    return SimpleNamespace(kv_pool=kv, mamba_pool=getattr(req_to_token_pool, "mamba_pool", None), sub_pools=sub_pools)


@dataclass
class Installed:
    name: str
    deferred: list[Callable[[], None]]


def install(name: str, req_to_token_pool: Any, allocator: Any) -> Installed:
    """Apply fault NAME to the server's pools; raises RuntimeError when the pools lack its target."""
    from kvdoctor.engines.sglang._faults import ENGINE_FAULTS, FaultState
    from kvdoctor.engines.sglang._instruments import Patches

    pools = live_pools(req_to_token_pool, allocator)
    patches = Patches()  # never closed: the fault lives as long as the server
    state = FaultState()
    if name == "drop-kv":  # switchable: the restore is skipped while armed, SGLang's own while not
        full = pools.sub_pools["full"]
        patches.set(full, "load_cpu_copy", _while_armed(name, lambda *a, **kw: None, full.load_cpu_copy))
        return Installed(name, state.deferred)
    if name == "retract-raise":
        patches.set(pools.kv_pool, "get_cpu_copy", _raising_copy(name, pools.kv_pool))
        return Installed(name, state.deferred)
    fault = ENGINE_FAULTS[name]
    reason = fault.needs(pools)  # type: ignore[arg-type]
    if reason:
        raise RuntimeError(f"--inject {name} needs {reason}; the server's pools have none")
    fault.install(patches, pools, state)  # type: ignore[arg-type]
    return Installed(name, state.deferred)


def _while_armed(name: str, faulty: Callable[..., Any], original: Callable[..., Any]) -> Callable[..., Any]:
    """FAULTY while fault NAME is armed (``kvdoctor.engines.arming``), ORIGINAL while it is not."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return (faulty if arming.armed(name) else original)(*args, **kwargs)

    return call


def _raising_copy(name: str, kv: Any) -> Callable[..., Any]:
    """``retract-raise`` (sglang#33385): the pool's ``get_cpu_copy`` raises ``NotImplementedError`` while armed, as
    DeepSeek-V4's pool does (``srt/mem_cache/deepseek_v4_memory_pool.py:521-522``); the allocator's call
    (``srt/mem_cache/allocator/token.py:81-86``) then kills the decode scheduler at its first retraction backup."""
    original = kv.get_cpu_copy
    pool = type(kv).__name__

    def get_cpu_copy(*args: Any, **kwargs: Any) -> Any:
        if not arming.armed(name):
            return original(*args, **kwargs)
        log("fault-fired", f"{name} {pool}.get_cpu_copy raises NotImplementedError")
        raise NotImplementedError(f"{pool} does not support get_cpu_copy (kvdoctor --inject {name}: sglang#33385)")

    return get_cpu_copy


def hooks(name: str) -> dict[str, Callable[[ModuleType], None]]:
    """Retraction fault NAME's hook (the ``impl`` of every retraction record): wrap ``Req.offload_kv_cache`` so the
    first retraction backup installs it on the server's pools (:func:`install`), and ``Req.load_kv_cache`` to count
    restores (and run a deferred one)."""

    def hook(module: ModuleType) -> None:
        req_class = module.Req
        original = req_class.offload_kv_cache
        original_load = req_class.load_kv_cache
        box: dict[str, Any] = {}

        @functools.wraps(original)
        def offload_kv_cache(self: Any, req_to_token_pool: Any, allocator: Any) -> Any:
            if not arming.armed(name):  # installed at the first armed backup; counted while armed
                return original(self, req_to_token_pool, allocator)
            if "installed" not in box:
                try:
                    box["installed"] = install(name, req_to_token_pool, allocator)
                except Exception as exc:
                    log("fault-refused", f"{name}: {exc}")
                    raise
                log("fault-installed", name)
            log("fault-offload", name)
            return original(self, req_to_token_pool, allocator)

        @functools.wraps(original_load)
        def load_kv_cache(self: Any, req_to_token_pool: Any, allocator: Any) -> Any:
            installed = box.get("installed")
            if installed is not None and arming.armed(name):
                while installed.deferred:  # restore-order: the previous restore's state arrives now
                    installed.deferred.pop(0)()
                log("fault-restore", name)
            return original_load(self, req_to_token_pool, allocator)

        req_class.offload_kv_cache = offload_kv_cache
        req_class.load_kv_cache = load_kv_cache
        log("fault-armed", f"{name} on Req.offload_kv_cache")

    return {SCHEDULE_BATCH_MODULE: hook}
