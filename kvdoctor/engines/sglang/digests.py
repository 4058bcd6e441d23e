"""Digests of a retracted request's state at every seam, recorded inside a live SGLang decode server.

Installed by the site hook (:mod:`kvdoctor.engines.sglang.server_hooks`) when ``KVDOCTOR_DIGEST_LOG``
names a file. For every retracted request and every component of its state (full-attention KV, its
scales, sliding-window KV, conv state, temporal/SSM state, side states) it records a short blake2b
digest of the bytes at three seams, and the slots each time:

- ``backup``: wraps ``Req.offload_kv_cache`` (``srt/managers/schedule_batch.py``): the live slots just
  before SGLang copies them (``live``) and the host copy SGLang made (``copy``);
- ``restore``: wraps ``Req.load_kv_cache``: the host copy just before it is loaded (``held``: did it
  change while held?), the slots the backup was taken from as they are now (``old_live``: a "copy" that
  changed with them is a view of the live pool) and the live slots just after loading (``live``);
- ``forward``: wraps ``Scheduler.run_batch`` (``srt/managers/scheduler.py``): the live slots of a
  restored request just before its next forward, and the position that forward feeds.

Digests alone cannot see a state that was copied faithfully but at the wrong moment, so the same
``run_batch`` wrapper keeps a *position ledger*: for every request, how many positions its recurrent
state has absorbed (the ``seq_lens`` of the last forward it was part of; for a request fresh from
prefill, its prompt). Each ``backup`` records that count (``state_pos``) beside the number of token
positions the KV backup holds (``kv_tokens``), and each ``forward`` the position it feeds (``fed``):
a recurrent state that has absorbed more positions than the KV holds, and is then fed the same
position again, is state from a forward whose token was thrown away.

Digests and positions still cannot say *which* state a backup holds, so with ``KVDOCTOR_STATE_BYTES=<n>`` the
recorder also keeps the recurrent state's bytes (conv, temporal and side states, as float32) of every request
whose state is at most N bytes (``--shrink`` makes it a few KiB), in ``<log>.bin`` beside the log: before every
forward (``state`` events: the state after ``pos`` positions), in each backup's copy and before each resumed
forward, with the token that forward is seeded with (``output_ids[-1]``, read where SGLang reads it:
``ScheduleBatch.process_prebuilt``). The reference decode keeps the same bytes in its own log, so
:mod:`kvdoctor.consistency.state_bytes` can say which reference position a backup equals.

Cheap enough to leave on: only what moves is hashed (one request's slots at each seam); every other
forward costs one dictionary update per running request. Each event is one JSON line (the reader is
:mod:`kvdoctor.consistency.attribution`). A failure here never reaches SGLang: it is logged to
``$KVDOCTOR_HOOK_LOG`` as ``digest-failed`` and the run reports the trace as incomplete.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import Any

DIGEST_ENV = "KVDOCTOR_DIGEST_LOG"
STATE_BYTES_ENV = "KVDOCTOR_STATE_BYTES"  # keep the recurrent state's bytes of requests whose state is at most this
DIGEST_SIZE = 8
RECURRENT = ("conv_state", "temporal_state", "side_state")
ORDER = ("full_kv", "full_kv_scales", "swa_kv", "swa_kv_scales", "conv_state", "temporal_state", "side_state")


def prompt_key(ids: Iterable[int]) -> str:
    """The key that ties a server's request to kvdoctor's prompt: a digest of its token ids (pure)."""
    return hashlib.blake2b(",".join(str(int(i)) for i in ids).encode(), digest_size=DIGEST_SIZE).hexdigest()


class _Digest:
    """blake2b over the raw bytes of tensors, fed in a fixed order, and how many bytes it saw."""

    def __init__(self) -> None:
        self.h = hashlib.blake2b(digest_size=DIGEST_SIZE)
        self.nbytes = 0

    def add(self, t: Any) -> None:
        import torch

        flat = t.detach().reshape(-1).contiguous()
        if flat.device.type != "cpu":
            flat = flat.cpu()
        raw = flat.view(torch.uint8).numpy()
        self.h.update(raw.data)
        self.nbytes += int(raw.size)

    def value(self) -> str:
        return f"{self.h.hexdigest()}:{self.nbytes}"


def _tensors(obj: Any) -> Iterable[Any]:
    """Every tensor of a nested list/tuple/dict, in order (the side states' copies)."""
    import torch

    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for key in obj:
            yield from _tensors(obj[key])
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _tensors(item)


# ---- what a host copy holds ------------------------------------------------------------------------


def _kv_copy(out: dict[str, _Digest], name: str, layers: Any) -> None:
    """``get_cpu_copy`` of a token pool: ``[layer][chunk] = [k, v]`` or ``[k, v, k_scale, v_scale]``.
    Digested plane by plane (k of every layer, then v, …), the order :func:`_kv_live` reads."""
    if not layers:
        return
    width = len(layers[0][0]) if layers[0] else 0
    for j in range(width):
        d = out.setdefault(name if j < 2 else f"{name}_scales", _Digest())
        for chunks in layers:
            for chunk in chunks:
                d.add(chunk[j])


def _mamba_parts(mamba: Any) -> dict[str, list[Any]]:
    """``MambaPool.get_cpu_copy``: ``(conv list, temporal)`` or ``(conv list, temporal, siblings)``, per component."""
    if mamba is None:
        return {}
    conv, temporal, *rest = mamba
    out: dict[str, list[Any]] = {"conv_state": [t for t in conv if t.numel()]}
    if temporal is not None and temporal.numel():
        out["temporal_state"] = [temporal]
    side = list(_tensors(rest))
    if side:
        out["side_state"] = side
    return out


def _add_parts(out: dict[str, _Digest], parts: dict[str, list[Any]]) -> None:
    for name, tensors in parts.items():
        d = out.setdefault(name, _Digest())
        for t in tensors:
            d.add(t)


def _split_copy(backup: Any, kv_pool: Any) -> tuple[Any, Any]:
    """A ``RetractionBackup``'s (KV copy, recurrent copy)."""
    kv_cpu = backup.cpu_tensors
    mamba = getattr(backup, "mamba_cpu", None)
    if getattr(kv_pool, "cpu_copy_carries_mamba", False) and isinstance(kv_cpu, tuple) and len(kv_cpu) == 2:
        kv_cpu, carried = kv_cpu
        mamba = carried if mamba is None else mamba
    return kv_cpu, mamba


def copy_recurrent(backup: Any, kv_pool: Any) -> dict[str, list[Any]]:
    """Per recurrent component, the tensors a ``RetractionBackup`` holds (``{}`` for no backup)."""
    return {} if backup is None else _mamba_parts(_split_copy(backup, kv_pool)[1])


def copy_digests(backup: Any, kv_pool: Any) -> dict[str, str]:
    """Per component, the digest of what a ``RetractionBackup`` holds (``{}`` for no backup)."""
    if backup is None:
        return {}
    out: dict[str, _Digest] = {}
    kv_cpu, mamba = _split_copy(backup, kv_pool)
    if isinstance(kv_cpu, dict):  # SWAKVPool: {"full": ..., "swa": ..., "swa_mask": ...}
        _kv_copy(out, "full_kv", kv_cpu.get("full"))
        if kv_cpu.get("swa") is not None:
            _kv_copy(out, "swa_kv", kv_cpu["swa"])
    elif isinstance(kv_cpu, list):
        _kv_copy(out, "full_kv", kv_cpu)
    elif kv_cpu is not None:
        d = out.setdefault("unparsed", _Digest())
        for t in _tensors(kv_cpu):
            d.add(t)
    _add_parts(out, _mamba_parts(mamba))
    return {k: out[k].value() for k in sorted(out, key=_rank)}


# ---- what the live slots hold ------------------------------------------------------------------


def _kv_live(out: dict[str, _Digest], name: str, pool: Any, idx: Any) -> None:
    k_buffer = getattr(pool, "k_buffer", None)
    if not k_buffer:
        return
    layers = int(getattr(pool, "layer_num", len(k_buffer)))  # what get_cpu_copy walks
    for buffers in (pool.k_buffer, pool.v_buffer):
        d = out.setdefault(name, _Digest())
        for layer in range(layers):
            d.add(buffers[layer][idx])
    if getattr(pool, "k_scale_buffer", None) and hasattr(pool, "_read_scales"):
        scales = [pool._read_scales(layer, idx) for layer in range(layers)]
        for j in range(2):
            d = out.setdefault(f"{name}_scales", _Digest())
            for pair in scales:
                d.add(pair[j])


def live_digests(req_to_token_pool: Any, allocator: Any, token_indices: Any, mamba_index: Any) -> dict[str, str]:
    """Per component, the digest of the live slots: KV at TOKEN_INDICES, recurrent state at MAMBA_INDEX."""
    import torch

    kv = allocator.get_kvcache()
    full = getattr(kv, "full_kv_pool", None) or kv
    out: dict[str, _Digest] = {}
    idx = token_indices.to(torch.int64)
    _kv_live(out, "full_kv", full, idx)
    swa_pool = getattr(kv, "swa_kv_pool", None)
    mapping = getattr(kv, "full_to_swa_index_mapping", None)
    if swa_pool is not None and mapping is not None:
        swa = mapping[idx].to(torch.int64)
        _kv_live(out, "swa_kv", swa_pool, swa[swa > 0])
    _add_parts(out, live_recurrent(req_to_token_pool, mamba_index))
    return {k: out[k].value() for k in sorted(out, key=_rank)}


def live_recurrent(req_to_token_pool: Any, mamba_index: Any) -> dict[str, list[Any]]:
    """Per recurrent component, the live slot's tensors at MAMBA_INDEX (``{}`` without a mamba pool or slot)."""
    import torch

    mamba_pool = getattr(req_to_token_pool, "mamba_pool", None)
    if mamba_pool is None or mamba_index is None:
        return {}
    slot = torch.as_tensor(mamba_index).reshape(1).to(torch.int64)
    translate = getattr(req_to_token_pool, "translate_mamba_indices", None)
    phys = translate(slot) if translate is not None else slot
    cache = mamba_pool.mamba_cache
    out: dict[str, list[Any]] = {"conv_state": [conv[:, phys] for conv in cache.conv if conv.numel()]}
    if cache.temporal is not None and cache.temporal.numel():
        out["temporal_state"] = [cache.temporal[:, phys]]
    side = [t for sibling in getattr(mamba_pool, "_slot_siblings", ()) for t in _tensors(sibling.get_cpu_slots(phys))]
    if side:
        out["side_state"] = side
    return out


def _rank(name: str) -> int:
    return ORDER.index(name) if name in ORDER else len(ORDER)


def slot_runs(indices: Sequence[int]) -> list[list[int]]:
    """``[[start, count], …]``: token slots as runs of consecutive indices (compact, exact)."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and runs[-1][0] + runs[-1][1] == i:
            runs[-1][1] += 1
        else:
            runs.append([int(i), 1])
    return runs


# ---- the recurrent state's bytes ----------------------------------------------------------------


class StateBytes:
    """Appends a request's recurrent state, per component as float32, to one binary file; each event says where."""

    def __init__(self, path: str, limit: int) -> None:
        self.path = path
        self.limit = limit
        self.fh: Any = None

    def keep(self, parts: dict[str, list[Any]]) -> dict[str, Any] | None:
        """``{"offset": byte, "parts": [[component, floats], …]}`` in the file, ``{"skipped": bytes}`` over the
        limit, None for no recurrent state."""
        import torch

        flat = {
            name: torch.cat([t.detach().reshape(-1).to("cpu", torch.float32) for t in tensors])
            for name, tensors in sorted(parts.items(), key=lambda kv: _rank(kv[0]))
            if tensors
        }
        if not flat:
            return None
        size = sum(int(t.numel()) * 4 for t in flat.values())
        if size > self.limit:
            return {"skipped": size}
        if self.fh is None:
            self.fh = open(self.path, "ab")  # noqa: SIM115 (held for the server's life; each write is flushed)
        offset = self.fh.tell()
        for t in flat.values():
            self.fh.write(t.numpy().tobytes())
        self.fh.flush()
        return {"offset": offset, "parts": [[name, int(t.numel())] for name, t in flat.items()]}


def bytes_path(log: str) -> str:
    """The binary file beside a digest log that holds its kept state (``digests.jsonl`` -> ``digests.bin``)."""
    stem, dot, ext = log.rpartition(".")
    return f"{stem}.bin" if dot and "/" not in ext else f"{log}.bin"


# ---- the recorder --------------------------------------------------------------------------------


class Recorder:
    """One server process's trace: the position ledger, the restored requests awaiting a forward, the log."""

    def __init__(self, path: str, on_error: Callable[[str], None], keep_bytes: int = 0) -> None:
        self.path = path
        self.on_error = on_error
        self.kept = StateBytes(bytes_path(path), keep_bytes) if keep_bytes > 0 else None
        self.seeds: dict[str, int] = {}  # rid -> the token a restored request's next forward is seeded with
        self.ledger: dict[str, tuple[int, str]] = {}  # rid -> (positions the recurrent state absorbed, source)
        self.pending: dict[str, int] = {}  # rid -> kv_tokens restored, until the request's next forward
        self.backed: dict[str, tuple[Any, Any]] = {}  # rid -> (token slots, mamba slot) its backup was taken from
        self.failed = False
        self.scheduler_seen = False

    def write(self, event: dict[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(event, separators=(",", ":")) + "\n")

    def guarded(self, what: str, fn: Callable[[], None]) -> None:
        """Run FN; a failure is logged once and never reaches SGLang."""
        try:
            fn()
        except Exception as exc:
            if not self.failed:
                self.failed = True
                self.on_error(f"{what}: {type(exc).__name__}: {exc}")

    def _base(self, event: str, req: Any, token_indices: Any) -> dict[str, Any]:
        kv = req.kv
        mamba = kv.mamba_pool_idx
        slots = [int(i) for i in token_indices.tolist()]
        return {
            "event": event,
            "pid": os.getpid(),
            "t": round(time.time(), 6),
            "rid": str(req.rid),
            "prompt": prompt_key(req.origin_input_ids),
            "seqlen": int(req.seqlen),
            "outputs": len(req.output_ids),
            "retraction": int(getattr(req, "retraction_count", 0)),
            "row": None if kv.req_pool_idx is None else int(kv.req_pool_idx),
            "mamba_slot": None if mamba is None else int(mamba),
            "kv_tokens": len(slots),
            "kv_slots": slot_runs(slots),
        }

    @staticmethod
    def _kv_indices(req: Any, req_to_token_pool: Any, n: int) -> Any:
        return req_to_token_pool.req_to_token[req.kv.req_pool_idx, :n]

    # -- seams
    def backup(self, req: Any, req_to_token_pool: Any, allocator: Any, offload: Callable[[], Any]) -> Any:
        before: dict[str, Any] = {}

        def live() -> None:
            idx = self._kv_indices(req, req_to_token_pool, req.seqlen - 1)
            before["event"] = self._base("backup", req, idx)
            before["live"] = live_digests(req_to_token_pool, allocator, idx, req.kv.mamba_pool_idx)
            mamba = req.kv.mamba_pool_idx
            self.backed[str(req.rid)] = (idx.clone(), None if mamba is None else mamba.clone())

        self.guarded("backup", live)
        out = offload()

        def after() -> None:
            if "event" not in before:
                return
            event = before["event"]
            event["retraction"] += 1  # SGLang counts it in reset_for_retract, right after this backup
            pos, source = self.ledger.get(event["rid"], (None, "unknown"))
            event |= {"state_pos": pos, "state_source": source, "live": before["live"]}
            event["copy"] = copy_digests(req.kv.retraction_backup, allocator.get_kvcache())
            if self.kept is not None:
                event["bytes"] = self.kept.keep(copy_recurrent(req.kv.retraction_backup, allocator.get_kvcache()))
            self.write(event)

        self.guarded("backup", after)
        return out

    def restore(self, req: Any, req_to_token_pool: Any, allocator: Any, load: Callable[[], Any]) -> Any:
        held: dict[str, Any] = {}

        def before() -> None:
            held["copy"] = copy_digests(req.kv.retraction_backup, allocator.get_kvcache())
            old = self.backed.pop(str(req.rid), None)
            if old is not None:  # the slots the backup came from, as they are now (a copy that aliases them follows)
                held["old"] = live_digests(req_to_token_pool, allocator, old[0], old[1])

        self.guarded("restore", before)
        out = load()

        def after() -> None:
            idx = self._kv_indices(req, req_to_token_pool, req.seqlen - 1)
            event = self._base("restore", req, idx)
            event["held"] = held.get("copy", {})
            event["old_live"] = held.get("old", {})
            event["live"] = live_digests(req_to_token_pool, allocator, idx, req.kv.mamba_pool_idx)
            self.write(event)
            self.pending[event["rid"]] = event["kv_tokens"]

        self.guarded("restore", after)
        return out

    def before_forward(self, scheduler: Any, batch: Any) -> None:
        """Ledger every request of a forward; digest a restored request's slots before its first one."""
        mode = batch.forward_mode
        if not self.scheduler_seen:
            self.scheduler_seen = True
            self.write(
                {
                    "event": "scheduler",
                    "pid": os.getpid(),
                    "t": round(time.time(), 6),
                    "overlap": bool(getattr(scheduler, "enable_overlap", False)),
                    "disaggregation": str(getattr(scheduler, "disaggregation_mode", "")),
                }
            )
        reqs = list(batch.reqs or [])
        if mode.is_prebuilt():
            for req in reqs:  # fresh from prefill: the transferred state covers the prompt
                self.ledger.setdefault(
                    str(req.rid), (len(req.origin_input_ids) + max(len(req.output_ids) - 1, 0), "prefill")
                )
            return
        seq_lens = getattr(batch, "seq_lens_cpu", None)
        if seq_lens is None or len(seq_lens) != len(reqs):
            for req in reqs:
                self.ledger.pop(str(req.rid), None)  # unknown from here on
            return
        ends = [int(n) for n in seq_lens.tolist()]
        extend = [int(n) for n in (getattr(batch, "extend_lens", None) or [])] if mode.is_extend() else []
        for i, req in enumerate(reqs):
            rid = str(req.rid)
            fed = ends[i] - (extend[i] if i < len(extend) else 1)
            kept = self._keep_state(scheduler, req, fed)
            if rid in self.pending:
                kv_tokens = self.pending.pop(rid)
                idx = self._kv_indices(req, scheduler.req_to_token_pool, kv_tokens)
                event = self._base("forward", req, idx)
                pos, source = self.ledger.get(rid, (None, "unknown"))
                event |= {"fed": fed, "mode": str(mode.name if hasattr(mode, "name") else mode)}
                event |= {"state_pos": pos, "state_source": source}
                event |= {"prompt_len": len(req.origin_input_ids), "seed": self.seeds.pop(rid, None), "bytes": kept}
                event["live"] = live_digests(
                    scheduler.req_to_token_pool, scheduler.token_to_kv_pool_allocator, idx, req.kv.mamba_pool_idx
                )
                self.write(event)
            self.ledger[rid] = (ends[i], "forward")

    def prebuilt(self, batch: Any) -> None:
        """``ScheduleBatch.process_prebuilt``: the token each restored request's next forward is seeded with."""
        for req in list(batch.reqs or []):
            if str(req.rid) in self.pending and req.output_ids:
                self.seeds[str(req.rid)] = int(req.output_ids[-1])

    def _keep_state(self, scheduler: Any, req: Any, fed: int) -> dict[str, Any] | None:
        """A ``state`` event: REQ's recurrent state before the forward that feeds position FED (it has absorbed FED
        positions, unless it was restored ahead), its bytes kept."""
        if self.kept is None:
            return None
        import torch

        parts = live_recurrent(scheduler.req_to_token_pool, req.kv.mamba_pool_idx)
        if any(t.device.type == "cuda" for ts in parts.values() for t in ts):
            torch.cuda.synchronize()  # the last forward may still be writing the slot on its stream
        kept = self.kept.keep(parts)
        if kept is None:
            return None
        self.write(
            {
                "event": "state",
                "pid": os.getpid(),
                "t": round(time.time(), 6),
                "rid": str(req.rid),
                "prompt": prompt_key(req.origin_input_ids),
                "pos": fed,
                "retraction": int(getattr(req, "retraction_count", 0)),
                "mamba_slot": None if req.kv.mamba_pool_idx is None else int(req.kv.mamba_pool_idx),
                "bytes": kept,
            }
        )
        return kept


def hook_schedule_batch(module: ModuleType, recorder: Recorder) -> None:
    """Wrap ``Req.offload_kv_cache`` and ``Req.load_kv_cache`` (the ``cpu_tensor`` backup and restore); keeping
    state bytes, ``ScheduleBatch.process_prebuilt`` too (the token a resumed request is seeded with)."""
    req_class = module.Req
    original_offload = req_class.offload_kv_cache
    original_load = req_class.load_kv_cache

    @functools.wraps(original_offload)
    def offload_kv_cache(self: Any, req_to_token_pool: Any, allocator: Any) -> Any:
        return recorder.backup(
            self, req_to_token_pool, allocator, lambda: original_offload(self, req_to_token_pool, allocator)
        )

    @functools.wraps(original_load)
    def load_kv_cache(self: Any, req_to_token_pool: Any, allocator: Any) -> Any:
        return recorder.restore(
            self, req_to_token_pool, allocator, lambda: original_load(self, req_to_token_pool, allocator)
        )

    req_class.offload_kv_cache = offload_kv_cache
    req_class.load_kv_cache = load_kv_cache
    batch_class = getattr(module, "ScheduleBatch", None)
    original_prebuilt = getattr(batch_class, "process_prebuilt", None)
    if batch_class is None or original_prebuilt is None or recorder.kept is None:
        return

    @functools.wraps(original_prebuilt)
    def process_prebuilt(self: Any, *args: Any, **kwargs: Any) -> Any:
        recorder.guarded("prebuilt", lambda: recorder.prebuilt(self))
        return original_prebuilt(self, *args, **kwargs)

    batch_class.process_prebuilt = process_prebuilt


def hook_scheduler(module: ModuleType, recorder: Recorder) -> None:
    """Wrap ``Scheduler.run_batch``: the ledger and the pre-forward digests run before SGLang's forward."""
    scheduler_class = module.Scheduler
    original = scheduler_class.run_batch

    @functools.wraps(original)
    def run_batch(self: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        recorder.guarded("forward", lambda: recorder.before_forward(self, batch))
        return original(self, batch, *args, **kwargs)

    scheduler_class.run_batch = run_batch
