"""Run-time wrappers around SGLang's own pool objects: the copy ledger and the aliasing check.

Nothing in SGLang's files is edited. Each wrapper is an *instance* attribute that shadows the class's
method on one pool object and calls the original; :class:`Patches` puts every attribute back when
the round trip ends, whatever happens.

- The ledger records, per request and component, how many times bytes left the device
  (``get_cpu_copy``) and came back (``load_cpu_copy``), and how many bytes, reading the copies SGLang
  returns and is handed: a component copied twice, or never, is red even when its bytes agree.
- The aliasing check looks at every tensor a backup holds: one that shares storage with a live pool
  buffer is no backup at all (on a CPU device ``.to("cpu")`` returns the tensor itself), and the
  bytes really are lost once another request reuses the slot. ``emulate_d2h`` copies such tensors,
  as a device-to-host copy would, so the rest of the path can still be checked; it is never the
  default and is printed in the header.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from kvdoctor.engines.sglang._planes import StatePlane
from kvdoctor.state.host_copy import CopyLedger


class Patches:
    """Instance attributes set on SGLang objects, each undone in reverse order on exit."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def set(self, obj: object, name: str, value: object) -> None:
        had = name in vars(obj)
        old = vars(obj).get(name)

        def undo() -> None:
            if had:
                setattr(obj, name, old)
            else:
                with contextlib.suppress(AttributeError):
                    delattr(obj, name)

        setattr(obj, name, value)
        self._undo.append(undo)

    def wrap(self, obj: object, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        """Replace OBJ.NAME (a bound method) with ``make(original)``."""
        self.set(obj, name, make(getattr(obj, name)))

    def close(self) -> None:
        while self._undo:
            self._undo.pop()()


def tensors_in(obj: Any) -> Iterator[torch.Tensor]:
    """Every tensor in a nested list/tuple/dict structure (what SGLang's CPU copies are)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from tensors_in(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from tensors_in(item)


def map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, list):
        return [map_tensors(x, fn) for x in obj]
    if isinstance(obj, tuple):
        return tuple(map_tensors(x, fn) for x in obj)
    if isinstance(obj, dict):
        return {k: map_tensors(v, fn) for k, v in obj.items()}
    return obj


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


@dataclass
class Alias:
    """A backup tensor that is a view of a live pool buffer."""

    component: str
    rid: int
    nbytes: int


@dataclass
class Instruments:
    """The ledger, the aliasing findings and the request each copy belongs to."""

    planes: list[StatePlane]
    emulate_d2h: bool = False
    ledger: CopyLedger = field(default_factory=CopyLedger)
    aliases: list[Alias] = field(default_factory=list)
    rid: int = -1
    live_storages: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for plane in self.planes:
            for buf in plane.buffers:
                self.live_storages[_storage(buf)] = plane.component

    def _check_alias(self, copy: Any) -> Any:
        """Record tensors of COPY that alias a live buffer; copy them if emulating a D2H copy."""

        def check(t: torch.Tensor) -> torch.Tensor:
            owner = self.live_storages.get(_storage(t))
            if owner is not None and t.numel():
                self.aliases.append(Alias(owner, self.rid, t.numel() * t.element_size()))
                return t.clone() if self.emulate_d2h else t
            return t

        return map_tensors(copy, check)

    def kv_bytes(self, role: str, copy: Any) -> dict[str, int]:
        """Bytes per component in an MHA pool's CPU copy: ``[layer][chunk] = [k, v, (k_scale, v_scale)]``."""
        out = {f"{role}_kv": 0}
        for layer in copy or ():
            for chunk in layer:
                out[f"{role}_kv"] += sum(t.numel() * t.element_size() for t in chunk[:2])
                if len(chunk) > 2:
                    key = f"{role}_kv_scales"
                    out[key] = out.get(key, 0) + sum(t.numel() * t.element_size() for t in chunk[2:])
        return out

    @staticmethod
    def mamba_bytes(copy: Any) -> dict[str, int]:
        """Bytes per component in ``MambaPool.get_cpu_copy``'s ``(conv list, temporal[, siblings])``."""
        conv, temporal = copy[0], copy[1]
        out = {"conv_state": sum(t.numel() * t.element_size() for t in conv)}
        if temporal is not None and temporal.numel():
            out["temporal_state"] = temporal.numel() * temporal.element_size()
        return out

    def _record(self, counts: dict[str, int], direction: str) -> None:
        for component, nbytes in counts.items():
            self.ledger.record(component, direction, self.rid, nbytes)

    def install(self, patches: Patches, kv_pools: dict[str, Any], mamba_pool: Any | None) -> None:
        """Wrap each token pool's and the mamba pool's get_cpu_copy / load_cpu_copy."""
        for role, pool in kv_pools.items():
            self._wrap_kv(patches, role, pool)
        if mamba_pool is not None:
            self._wrap_mamba(patches, mamba_pool)

    def _wrap_kv(self, patches: Patches, role: str, pool: Any) -> None:
        def get(original: Callable[..., Any]) -> Callable[..., Any]:
            def get_cpu_copy(indices: Any, *args: Any, **kwargs: Any) -> Any:
                copy = original(indices, *args, **kwargs)
                self._record(self.kv_bytes(role, copy), "out")
                return self._check_alias(copy)

            return get_cpu_copy

        def load(original: Callable[..., Any]) -> Callable[..., Any]:
            def load_cpu_copy(copy: Any, *args: Any, **kwargs: Any) -> Any:
                self._record(self.kv_bytes(role, copy), "in")
                return original(copy, *args, **kwargs)

            return load_cpu_copy

        patches.wrap(pool, "get_cpu_copy", get)
        patches.wrap(pool, "load_cpu_copy", load)

    def _wrap_mamba(self, patches: Patches, pool: Any) -> None:
        def get(original: Callable[..., Any]) -> Callable[..., Any]:
            def get_cpu_copy(indices: Any) -> Any:
                copy = original(indices)
                self._record(self.mamba_bytes(copy), "out")
                return self._check_alias(copy)

            return get_cpu_copy

        def load(original: Callable[..., Any]) -> Callable[..., Any]:
            def load_cpu_copy(copy: Any, indices: Any) -> Any:
                self._record(self.mamba_bytes(copy), "in")
                return original(copy, indices)

            return load_cpu_copy

        patches.wrap(pool, "get_cpu_copy", get)
        patches.wrap(pool, "load_cpu_copy", load)
