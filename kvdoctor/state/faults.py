"""The known silent retraction failures, each a named swap of one strategy in the protocol.

A fault names the components it must turn red, and says when it cannot apply to a model (an MXFP8
scale fault on a bf16 pool proves nothing, so ``--inject`` refuses it instead of passing green).
What each fault is (its summary, what it needs, the SGLang code it restates) is its record in the fault
registry (``kvdoctor.core.faults``, target ``model-roundtrip``); :data:`FAULTS` holds only how it is done,
keyed by the registry's names (``tests/state/test_faults.py`` holds the two equal).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

from kvdoctor._exceptions import InputError
from kvdoctor.core import faults as registry
from kvdoctor.core.faults import Target
from kvdoctor.core.servers import Server
from kvdoctor.state.host_copy import CopyPolicy, HostChunks
from kvdoctor.state.pools import PADDING_SLOT, Plane, Pools
from kvdoctor.state.retraction import (
    BACKENDS,
    MambaContract,
    RetractionProtocol,
    Step,
)

RECURRENT = ("conv_state", "temporal_state")


@dataclass(frozen=True)
class KVFirst:
    """Restore order bug: KV loaded and the request made runnable before its recurrent state is back."""

    def run(self, steps: list[Step], visible: Callable[[], None]) -> None:
        for step in steps:
            if step.kind == "kv":
                step.run()
        visible()
        for step in steps:
            if step.kind != "kv":
                step.run()


def pad_with_padding_slot(
    planes: list[Plane], chunks: HostChunks, slots: torch.Tensor
) -> tuple[HostChunks, torch.Tensor]:
    """A restore that pads its index list with slot 0 (as padded batches do) and does not filter it."""
    by_name = {p.name: p for p in planes}
    last = dict(chunks[-1])
    for name, t in last.items():
        per = by_name[name].units_per_slot
        last[name] = torch.cat([t, t[:, -per:]], dim=1)
    pad = torch.tensor([PADDING_SLOT], dtype=slots.dtype, device=slots.device)
    return [*chunks[:-1], last], torch.cat([slots, pad])


@dataclass(frozen=True)
class Fault:
    """One ``--inject`` fault: what it breaks, when it applies, and the strategy it swaps in."""

    name: str
    targets: tuple[str, ...]  # the components its verdict must name
    needs: Callable[[Pools], str | None]  # why it cannot apply to these pools, or None
    apply: Callable[[RetractionProtocol], RetractionProtocol]

    @property
    def summary(self) -> str:
        """What it does, in one line: its registry record's."""
        return registry.get(self.name, server=Server.SGLANG, target=Target.MODEL).does

    def check(self, pools: Pools, model: str) -> None:
        reason = self.needs(pools)
        if reason:
            raise InputError(f"--inject {self.name} needs {reason}; {model} has none")

    def expected(self, present: set[str]) -> set[str]:
        return {t for t in self.targets if t in present}


def _recurrent(pools: Pools) -> str | None:
    return None if pools.mamba is not None else "recurrent (conv/temporal) state"


def _scales(pools: Pools) -> str | None:
    has = any(sub.scale_planes for sub in pools.sub_pools)
    return None if has else "an MXFP8 pool with block-scale planes (--kv-cache-dtype mxfp8)"


def _swa(pools: Pools) -> str | None:
    return None if pools.swa is not None else "a sliding-window KV sub-pool"


def _always(pools: Pools) -> str | None:
    return None


def _drop(*components: str) -> Callable[[RetractionProtocol], RetractionProtocol]:
    def apply(proto: RetractionProtocol) -> RetractionProtocol:
        return dataclasses.replace(proto, copy_policy=CopyPolicy(proto.copy_policy.dropped | set(components)))

    return apply


FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault(
            "missing-mamba",
            RECURRENT,
            _recurrent,
            lambda p: dataclasses.replace(p, mamba=MambaContract(claimed=True, pool_copies=False)),
        ),
        Fault(
            "double-mamba",
            RECURRENT,
            _recurrent,
            lambda p: dataclasses.replace(p, mamba=MambaContract(claimed=False, pool_copies=True)),
        ),
        Fault(
            "drop-block-scale",
            ("full_kv_scales", "swa_kv_scales"),
            _scales,
            _drop("full_kv_scales", "swa_kv_scales"),
        ),
        Fault(
            "drop-swa",
            ("swa_kv", "swa_kv_scales"),
            _swa,
            _drop("swa_kv", "swa_kv_scales"),
        ),
        Fault(
            "host-pool-on-ssm",
            RECURRENT,
            _recurrent,
            lambda p: dataclasses.replace(p, backend=BACKENDS["host_pool"]),
        ),
        Fault(
            "restore-order",
            RECURRENT,
            _recurrent,
            lambda p: dataclasses.replace(p, order=KVFirst()),
        ),
        Fault(
            "clobber-padding",
            ("padding_slot",),
            _always,
            lambda p: dataclasses.replace(p, restore_slots=pad_with_padding_slot),
        ),
    )
}


def get_fault(name: str) -> Fault:
    if name not in FAULTS:
        raise InputError(f"unknown fault '{name}'; choose one of {', '.join(FAULTS)}")
    return FAULTS[name]
