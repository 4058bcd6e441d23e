"""The decode-retraction backup and restore protocol, as SGLang 0.5.23 runs it.

Offload (``Req.offload_kv_cache``, schedule_batch.py:2109-2128): the slots are
``req_to_token[req, :seqlen - 1]``; the KV pool's ``get_cpu_copy`` moves what its class carries;
the caller backs the recurrent state up itself exactly when ``_mamba_pool_needing_backup`` says so
(the pool's ``cpu_copy_carries_mamba`` is False and the request pool is hybrid, 2102-2107).

Restore (``Req.load_kv_cache``, 2130-2147) runs after new slots are allocated: recurrent state
FIRST, then KV; only then may the scheduler run the request. ``host_pool`` (common.py:331-398)
moves full and SWA KV through the HiCache host pool and has no recurrent-state sidecar.

Every moving part is a small strategy object in ``RetractionProtocol``; a fault (``faults.py``) swaps one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from kvdoctor.core.sglang.policy import PoolLayout
from kvdoctor.state.host_copy import (
    CopyLedger,
    CopyPolicy,
    HostChunks,
    KVBackup,
    MambaCopier,
    Mover,
    PoolCopier,
    SlotPolicy,
    exact_slots,
)
from kvdoctor.state.pools import Pools, Request, token_slots


@dataclass(frozen=True)
class MambaContract:
    """``cpu_copy_carries_mamba`` as the caller reads it, and what the pool's copy really does."""

    claimed: bool
    pool_copies: bool


@dataclass
class RetractionBackup:
    """``RetractionBackup`` (common.py:39-44): the KV copy, and the caller's mamba copy if any."""

    kv: KVBackup
    mamba_cpu: HostChunks | None = None


@dataclass
class Session:
    """The pools, the copy engine and the ledger one protocol run works against."""

    pools: Pools
    mover: Mover
    ledger: CopyLedger
    host_pool_carries: frozenset[str] = frozenset()  # core.policy.backup_carries("host_pool", …)
    on_visible: Callable[[Request], None] = lambda req: None


@dataclass(frozen=True)
class Step:
    """One restore action; ``kind`` is "state" (recurrent) or "kv"."""

    kind: str
    run: Callable[[], None]


class RestoreOrder(Protocol):
    def run(self, steps: list[Step], visible: Callable[[], None]) -> None: ...


@dataclass(frozen=True)
class StateFirst:
    """SGLang's order (schedule_batch.py:2130-2147): the caller's recurrent-state copy, then the KV
    pool's load (its KV, then any state the pool carries itself), and only then is the request runnable."""

    def run(self, steps: list[Step], visible: Callable[[], None]) -> None:
        for step in steps:
            step.run()
        visible()


def _caller_backs_up(layout: PoolLayout, claimed: bool) -> bool:
    """``_mamba_pool_needing_backup``, evaluated by core on the attribute the caller sees."""
    return dataclasses.replace(layout, cpu_copy_carries_mamba=claimed).caller_backs_up_mamba


@dataclass(frozen=True)
class RetractionProtocol:
    """The strategies a retraction is made of; the defaults are SGLang's behaviour."""

    backend: Backend
    copy_policy: CopyPolicy
    mamba: MambaContract
    order: RestoreOrder = field(default_factory=StateFirst)
    restore_slots: SlotPolicy = exact_slots

    def copier(self, session: Session) -> PoolCopier:
        return PoolCopier(
            session.pools, session.mover, session.ledger, self.copy_policy, self.mamba.pool_copies, self.restore_slots
        )


class Backend(Protocol):
    name: str

    def offload(self, proto: RetractionProtocol, session: Session, req: Request) -> RetractionBackup: ...

    def restore(self, proto: RetractionProtocol, session: Session, req: Request, backup: RetractionBackup) -> None: ...


@dataclass(frozen=True)
class CpuTensorBackend:
    """``cpu_tensor``: ``Req.offload_kv_cache`` / ``Req.load_kv_cache``."""

    name: str = "cpu_tensor"

    def offload(self, proto: RetractionProtocol, session: Session, req: Request) -> RetractionBackup:
        pools = session.pools
        kv = proto.copier(session).get_cpu_copy(token_slots(pools, req), req.mamba_slot, req.rid)
        mamba_cpu = None
        needed = _caller_backs_up(pools.layout, proto.mamba.claimed)
        if needed and pools.mamba is not None and req.mamba_slot is not None:
            mamba = MambaCopier(pools.mamba, pools, session.mover, session.ledger)
            mamba_cpu = mamba.get_cpu_copy(req.mamba_slot, req.rid)
        return RetractionBackup(kv, mamba_cpu)

    def restore(self, proto: RetractionProtocol, session: Session, req: Request, backup: RetractionBackup) -> None:
        pools, copier = session.pools, proto.copier(session)
        slots = token_slots(pools, req)
        steps: list[Step] = []
        if backup.mamba_cpu is not None and pools.mamba is not None and req.mamba_slot is not None:
            mamba = MambaCopier(pools.mamba, pools, session.mover, session.ledger)
            chunks, slot = backup.mamba_cpu, req.mamba_slot
            steps.append(Step("state", lambda: mamba.load_cpu_copy(chunks, slot, req.rid)))
        steps.append(Step("kv", lambda: copier.load_kv(backup.kv, slots, req.rid)))
        steps.append(Step("state", lambda: copier.load_mamba(backup.kv, req.mamba_slot, req.rid)))
        proto.order.run(steps, lambda: session.on_visible(req))


@dataclass(frozen=True)
class HostPoolBackend:
    """``host_pool``: the unified tree backs up full and SWA KV only (scales only where core says)."""

    name: str = "host_pool"

    def _copier(self, proto: RetractionProtocol, session: Session) -> PoolCopier:
        others = {p.component for p in session.pools.all_planes()} - session.host_pool_carries
        policy = CopyPolicy(proto.copy_policy.dropped | others)
        return PoolCopier(session.pools, session.mover, session.ledger, policy, False, proto.restore_slots)

    def offload(self, proto: RetractionProtocol, session: Session, req: Request) -> RetractionBackup:
        slots = token_slots(session.pools, req)
        return RetractionBackup(self._copier(proto, session).get_cpu_copy(slots, None, req.rid))

    def restore(self, proto: RetractionProtocol, session: Session, req: Request, backup: RetractionBackup) -> None:
        slots = token_slots(session.pools, req)
        copier = self._copier(proto, session)
        proto.order.run(
            [Step("kv", lambda: copier.load_kv(backup.kv, slots, req.rid))], lambda: session.on_visible(req)
        )


BACKENDS: dict[str, Backend] = {"cpu_tensor": CpuTensorBackend(), "host_pool": HostPoolBackend()}


def default_protocol(layout: PoolLayout, backend: str) -> RetractionProtocol:
    """SGLang's protocol for LAYOUT on BACKEND: the pool's contract is what its copy really does."""
    carries = layout.cpu_copy_carries_mamba
    return RetractionProtocol(BACKENDS[backend], CopyPolicy(), MambaContract(claimed=carries, pool_copies=carries))
