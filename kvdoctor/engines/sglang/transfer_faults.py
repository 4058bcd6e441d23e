"""Faults on the PD transfer inside a running SGLang server, and the observer that proves the transfer ran.

Every PD request crosses the transfer once: the prefill's transfer worker sends its KV pages, then (last chunk) its
state components (``MooncakeKVManager.maybe_send_extra``, ``srt/disaggregation/mooncake/conn.py:1943-1949``, called at
2759-2766) and its first token's metadata (``send_aux``, 1780-1803); the decode polls the transfer and commits it to
the request (``DecodeTransferQueue._commit_transfer_to_req``, ``srt/disaggregation/decode.py:2600``). Unlike the
retraction faults (:mod:`kvdoctor.engines.sglang.live_faults`), these fire without any memory pressure.

- ``drop-pd-state`` (sglang#23773, on the **prefill**): ``maybe_send_extra`` returns 0 (success) without sending any
  state component. The KV and the first token arrive; the decode's state slot keeps whatever it held.
- ``clear-pd-state`` (sglang#32995, on the **decode**): after the commit, the request's recurrent state is marked for
  clearing and cleared. In 0.5.23 a fresh decode slot is marked at allocation (``HybridReqToTokenPool.alloc``,
  ``srt/mem_cache/memory_pool.py:1592-1602``) and the mark is consumed only by an extend
  (``ScheduleBatch._collect_deferred_mamba_cow_and_clear``, ``srt/managers/schedule_batch.py:3240-3253``, from
  ``prepare_for_extend``), which a transferred request never runs (``prepare_for_prebuilt``,
  ``srt/disaggregation/decode_schedule_batch_mixin.py:23-107``): setting the mark alone would change nothing, so the
  fault also runs the clear the consumer runs (``MambaPool.clear_slots``, ``memory_pool.py:1147``), as the bug's
  "next initialization step" did.

Each fault is one function here, the one its registry record names (``Fault.impl``: :func:`drop_pd_state`,
:func:`clear_pd_state`), returning the SGLang module it wraps and the hook. Each checks
:func:`kvdoctor.engines.arming.armed` at every firing (disarmed: SGLang's own call runs) and logs
``fault-fired NAME room=ROOM`` per request it broke. The observer (``KVDOCTOR_PATCHES=transfer-observer``) logs
``transfer-sent`` (``send_aux``), ``transfer-state`` (``maybe_send_extra``) and ``transfer-committed`` (the commit) with
each request's bootstrap room; it wraps the faults, so it counts the calls a fault faked. Observation only.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kvdoctor.engines import arming, hook_log

__all__ = ["DECODE_MODULE", "MOONCAKE_MODULE", "OBSERVER", "clear_pd_state", "drop_pd_state", "observer_hooks"]

OBSERVER = "transfer-observer"  # the KVDOCTOR_PATCHES word that installs the observer
MOONCAKE_MODULE = "sglang.srt.disaggregation.mooncake.conn"  # server_hooks.MOONCAKE_MODULE (no import: it imports us)
DECODE_MODULE = "sglang.srt.disaggregation.decode"
SENT, STATE, COMMITTED = "transfer-sent", "transfer-state", "transfer-committed"


def _log(event: str, detail: str = "") -> None:
    hook_log.append("KVDOCTOR_HOOK_LOG", event, detail)  # the site hook's log (server_hooks.LOG_ENV)


def _room(req: Any) -> str:
    """A request's bootstrap room: a TransferInfo's ``room``, a decode request's ``req.bootstrap_room``."""
    room = getattr(req, "room", None)
    if room is None:
        room = getattr(getattr(req, "req", None), "bootstrap_room", None)
    return f"room={room}"


def _committed(decode_req: Any) -> bool:
    """The commit kept the request (it aborts one whose metadata is corrupt: ``decode.py:2636-2672``)."""
    req = decode_req.req
    return getattr(req, "finished_reason", None) is None or type(req.finished_reason).__name__ != "FINISH_ABORT"


def drop_pd_state(name: str) -> dict[str, Callable[[ModuleType], None]]:
    """``drop-pd-state``'s hook (its record's ``impl``): the prefill's ``MooncakeKVManager.maybe_send_extra``."""

    def hook(module: ModuleType) -> None:
        manager = module.MooncakeKVManager
        original = manager.maybe_send_extra

        @functools.wraps(original)
        def maybe_send_extra(self: Any, req: Any, prefill_state_indices: Any, *args: Any, **kwargs: Any) -> Any:
            if not arming.armed(name):
                return original(self, req, prefill_state_indices, *args, **kwargs)
            kinds = len(getattr(self.kv_args, "state_types", []) or [])
            _log("fault-fired", f"{name} {_room(req)} state_types={kinds} sent=0")
            return 0  # success, nothing sent

        manager.maybe_send_extra = maybe_send_extra
        _log("fault-installed", f"{name} on MooncakeKVManager.maybe_send_extra")

    return {MOONCAKE_MODULE: hook}


def clear_pd_state(name: str) -> dict[str, Callable[[ModuleType], None]]:
    """``clear-pd-state``'s hook (its record's ``impl``): the decode's
    ``DecodeTransferQueue._commit_transfer_to_req``."""

    def hook(module: ModuleType) -> None:
        queue = module.DecodeTransferQueue
        original = queue._commit_transfer_to_req

        @functools.wraps(original)
        def _commit_transfer_to_req(self: Any, decode_req: Any) -> Any:
            out = original(self, decode_req)
            req = decode_req.req
            if not arming.armed(name) or not _committed(decode_req) or getattr(req.kv, "mamba_pool_idx", None) is None:
                return out
            pool = self.scheduler.req_to_token_pool
            req.kv.mamba_needs_clear = True  # the bug: the mark outlives the transfer that filled the slot
            pool.mamba_pool.clear_slots(pool.translate_mamba_indices(req.kv.mamba_pool_idx.unsqueeze(0)))
            req.kv.mamba_needs_clear = False  # consumed, as _collect_deferred_mamba_cow_and_clear does
            _log("fault-fired", f"{name} {_room(decode_req)} slot={int(req.kv.mamba_pool_idx)}")
            return out

        queue._commit_transfer_to_req = _commit_transfer_to_req
        _log("fault-installed", f"{name} on DecodeTransferQueue._commit_transfer_to_req")

    return {DECODE_MODULE: hook}


def _observe_send(module: ModuleType) -> None:
    manager = module.MooncakeKVManager
    send_aux, send_extra = manager.send_aux, manager.maybe_send_extra

    @functools.wraps(send_aux)
    def observed_send_aux(self: Any, req: Any, *args: Any, **kwargs: Any) -> Any:
        rc = send_aux(self, req, *args, **kwargs)
        _log(SENT, f"{_room(req)} rc={rc}")
        return rc

    @functools.wraps(send_extra)
    def observed_send_extra(self: Any, req: Any, *args: Any, **kwargs: Any) -> Any:
        rc = send_extra(self, req, *args, **kwargs)
        _log(STATE, f"{_room(req)} rc={rc}")
        return rc

    manager.send_aux, manager.maybe_send_extra = observed_send_aux, observed_send_extra
    _log("observing", "MooncakeKVManager.send_aux, MooncakeKVManager.maybe_send_extra")


def _observe_commit(module: ModuleType) -> None:
    queue = module.DecodeTransferQueue
    commit = queue._commit_transfer_to_req

    @functools.wraps(commit)
    def observed_commit(self: Any, decode_req: Any) -> Any:
        out = commit(self, decode_req)
        if _committed(decode_req):
            _log(COMMITTED, _room(decode_req))
        return out

    queue._commit_transfer_to_req = observed_commit
    _log("observing", "DecodeTransferQueue._commit_transfer_to_req")


def observer_hooks() -> dict[str, Callable[[ModuleType], None]]:
    """The observer's hooks: the prefill's sends and the decode's commit (each server runs the one it imports)."""
    return {MOONCAKE_MODULE: _observe_send, DECODE_MODULE: _observe_commit}
