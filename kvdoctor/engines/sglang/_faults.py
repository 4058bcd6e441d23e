"""The seven ``--inject`` faults, done to SGLang's own objects at run time.

Names and summaries come from the fault registry (``kvdoctor.core.faults``, target ``engine-roundtrip``), the
target components from :data:`kvdoctor.state.faults.FAULTS` (one list of faults for both engines); only *how*
each is done differs: here it is an instance attribute or a
wrapper on one of SGLang's pool objects (never an edit of SGLang's files), installed through
:class:`Patches` and undone when the run ends. Each fault says when it cannot apply (an MXFP8 scale
fault on a bf16 pool proves nothing), and the round trip refuses it instead of passing green.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from kvdoctor._exceptions import InputError
from kvdoctor.core import faults as registry
from kvdoctor.core.faults import Target
from kvdoctor.core.servers import Server
from kvdoctor.engines.sglang._instruments import Patches
from kvdoctor.engines.sglang._pools import EnginePools
from kvdoctor.state.faults import FAULTS


@dataclass
class FaultState:
    """What a fault needs during the run: the restore phase, and deferred restores."""

    restoring: bool = False
    deferred: list[Callable[[], None]] = field(default_factory=list)

    def run_deferred(self) -> None:
        while self.deferred:
            self.deferred.pop(0)()


def _needs_mamba(pools: EnginePools) -> str | None:
    return None if pools.mamba_pool is not None else "recurrent (conv/temporal) state"


def _needs_scales(pools: EnginePools) -> str | None:
    has = any(getattr(p, "k_scale_buffer", None) for p in pools.sub_pools.values())
    return None if has else "an MXFP8 pool with block-scale buffers (--kv-cache-dtype mxfp8)"


def _needs_swa(pools: EnginePools) -> str | None:
    return None if "swa" in pools.sub_pools else "a sliding-window KV sub-pool (SWAKVPool)"


def _always(pools: EnginePools) -> str | None:
    return None


def _kv_pool_skips_mamba(patches: Patches, pools: EnginePools) -> None:
    """The KV pool's CPU copy leaves the recurrent state behind while the caller trusts it."""
    kv = pools.kv_pool
    if kv.cpu_copy_carries_mamba:
        patches.wrap(kv, "get_cpu_copy", lambda orig: lambda idx, mamba_indices=None, **kw: orig(idx, **kw))
    else:
        patches.set(kv, "cpu_copy_carries_mamba", True)


def _missing_mamba(patches: Patches, pools: EnginePools, state: FaultState) -> None:
    _kv_pool_skips_mamba(patches, pools)


def _double_mamba(patches: Patches, pools: EnginePools, state: FaultState) -> None:
    """The pool and the caller both copy the recurrent state."""
    kv, mamba = pools.kv_pool, pools.mamba_pool
    if kv.cpu_copy_carries_mamba:
        patches.set(kv, "cpu_copy_carries_mamba", False)
        return
    extra: list[Any] = []  # the caller's extra copies, restored in retraction order

    def get(orig: Callable[..., Any]) -> Callable[..., Any]:
        def get_cpu_copy(idx: Any, mamba_indices: Any = None, **kw: Any) -> Any:
            if mamba_indices is not None:
                extra.append(mamba.get_cpu_copy(mamba_indices.reshape(1)))
            return orig(idx, mamba_indices=mamba_indices, **kw)

        return get_cpu_copy

    def load(orig: Callable[..., Any]) -> Callable[..., Any]:
        def load_cpu_copy(copy: Any, idx: Any, mamba_indices: Any = None, **kw: Any) -> Any:
            result = orig(copy, idx, mamba_indices=mamba_indices, **kw)
            if mamba_indices is not None and extra:
                mamba.load_cpu_copy(extra.pop(0), mamba_indices.reshape(1))
            return result

        return load_cpu_copy

    patches.wrap(kv, "get_cpu_copy", get)
    patches.wrap(kv, "load_cpu_copy", load)


def _drop_block_scale(patches: Patches, pools: EnginePools, state: FaultState) -> None:
    """The restore writes the FP8 payload but not its E8M0 scales."""
    for pool in pools.sub_pools.values():
        if getattr(pool, "k_scale_buffer", None):
            patches.wrap(
                pool, "_write_scales", lambda orig: lambda *a, **kw: None if state.restoring else orig(*a, **kw)
            )


def _drop_swa(patches: Patches, pools: EnginePools, state: FaultState) -> None:
    """The restore brings the full-attention KV back but not the sliding-window KV."""
    patches.set(pools.sub_pools["swa"], "load_cpu_copy", lambda *a, **kw: None)


def _host_pool_on_ssm(patches: Patches, pools: EnginePools, state: FaultState) -> None:
    """host_pool moves KV pages only (no recurrent-state sidecar): the KV copy runs, the state stays."""
    _kv_pool_skips_mamba(patches, pools)


def _restore_order(patches: Patches, pools: EnginePools, state: FaultState) -> None:
    """The request is made runnable before its recurrent state is back (the state load is deferred)."""
    patches.wrap(
        pools.mamba_pool, "load_cpu_copy", lambda orig: lambda *a, **kw: state.deferred.append(lambda: orig(*a, **kw))
    )


def _clobber_padding(patches: Patches, pools: EnginePools, state: FaultState) -> None:
    """The restore pads its index list with slot 0 (as padded batches do) and does not filter it."""
    pool = pools.sub_pools["full"]
    chunk = int(pool.cpu_offloading_chunk_size)

    def load(orig: Callable[..., Any]) -> Callable[..., Any]:
        def load_cpu_copy(copy: Any, indices: torch.Tensor, *args: Any, **kw: Any) -> Any:
            padded = []
            for layer in copy:
                layer = list(layer)
                if len(indices) % chunk == 0:
                    layer.append([t[-1:] for t in layer[-1]])
                else:
                    layer[-1] = [torch.cat([t, t[-1:]]) for t in layer[-1]]
                padded.append(layer)
            pad = torch.zeros(1, dtype=indices.dtype, device=indices.device)
            return orig(padded, torch.cat([indices, pad]), *args, **kw)

        return load_cpu_copy

    patches.wrap(pool, "load_cpu_copy", load)


@dataclass(frozen=True)
class EngineFault:
    """A fault of :data:`FAULTS`, done to SGLang's objects."""

    name: str
    needs: Callable[[EnginePools], str | None]
    install: Callable[[Patches, EnginePools, FaultState], None]
    inner: bool = False  # installed beneath the ledger (the ledger sees what the caller asked for)

    @property
    def summary(self) -> str:
        return registry.get(self.name, server=Server.SGLANG, target=Target.ENGINE).does

    @property
    def targets(self) -> tuple[str, ...]:
        return FAULTS[self.name].targets

    def check(self, pools: EnginePools, model: str) -> None:
        reason = self.needs(pools)
        if reason:
            raise InputError(f"--inject {self.name} needs {reason}; {model} has none in SGLang's pools")

    def expected(self, present: set[str]) -> set[str]:
        return {t for t in self.targets if t in present}


ENGINE_FAULTS: dict[str, EngineFault] = {
    f.name: f
    for f in (
        EngineFault("missing-mamba", _needs_mamba, _missing_mamba),
        EngineFault("double-mamba", _needs_mamba, _double_mamba),
        EngineFault("drop-block-scale", _needs_scales, _drop_block_scale),
        EngineFault("drop-swa", _needs_swa, _drop_swa),
        EngineFault("host-pool-on-ssm", _needs_mamba, _host_pool_on_ssm),
        EngineFault("restore-order", _needs_mamba, _restore_order),
        EngineFault("clobber-padding", _always, _clobber_padding, inner=True),
    )
}
assert set(ENGINE_FAULTS) == set(FAULTS), "every fault must exist for both engines"


def get_engine_fault(name: str) -> EngineFault:
    if name not in ENGINE_FAULTS:
        raise InputError(f"unknown fault '{name}'; choose one of {', '.join(ENGINE_FAULTS)}")
    return ENGINE_FAULTS[name]
