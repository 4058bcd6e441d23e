"""``--scenario offload``: preempt's run with a CPU tier on the pressured server, the requests resumed from
preemption loading their blocks from it instead of recomputing them.

Shared: the result (:class:`OffloadResult`, the ``offload`` evidence beside preempt's keys) and its gates: the
pressure gate (the preemptions ran) and beside it the offload gate (the resumed requests' blocks came from the CPU
tier: :func:`kvdoctor.consistency.gates.offload`). The connector, its counters and its words are the server's part
(``consistency/servers/vllm/offload.py``: vLLM's OffloadingConnector).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from kvdoctor.consistency import gates, servers
from kvdoctor.consistency.gates import Gate
from kvdoctor.consistency.probe_vllm import OffloadCount
from kvdoctor.consistency.result import ConsistencyResult
from kvdoctor.consistency.scenarios.preempt import pressure

if TYPE_CHECKING:
    from kvdoctor.consistency.deploy import Deployment
    from kvdoctor.consistency.prepared import Prepared

__all__ = ["SCENARIO", "OffloadDoc", "OffloadEvidence", "OffloadResult"]


class OffloadDoc(TypedDict, total=False):
    """``--scenario offload``'s evidence (``record`` in ``consistency/servers/vllm/offload.py``): the CPU tier, then
    per counter (load_bytes, store_bytes, external prefix-cache hits/queries) each role's delta."""

    kv_offloading_size_gib: float
    cpu_tier_bytes: int
    request_bytes: int
    load_bytes: dict[str, int | None]
    store_bytes: dict[str, int | None]
    external_prefix_cache_hits: dict[str, int | None]
    external_prefix_cache_queries: dict[str, int | None]
    source: str


@dataclass(frozen=True)
class OffloadResult(ConsistencyResult):
    """``--scenario offload``: preempt's result plus the scenario and the OffloadingConnector's evidence (a separate
    class, so a preempt run's JSON keeps exactly its keys)."""

    scenario: str = "offload"
    # the pressured server's --kv-offloading-size, and per role the bytes loaded from / stored to the CPU tier and
    # the external prefix-cache hits/queries during its bursts (deltas from /metrics; None when unknown)
    offload: OffloadDoc = field(default_factory=OffloadDoc)

    def evidence(self) -> str:
        """The preemptions and the bytes the pressured server loaded back from its CPU tier."""
        loaded = ((self.offload.get("load_bytes") or {}).get("pressured")) if self.offload else None
        return f"{super().evidence()}, {f'{loaded:,}' if loaded is not None else '?'} bytes loaded from the CPU tier"


class OffloadEvidence(TypedDict, total=False):
    """What a server's ``record`` finds for the gate: both servers' counts (reference, subject)."""

    offload_loads: tuple[OffloadCount, OffloadCount]


class Offload:
    name = "offload"
    proof = "vLLM's OffloadingConnector, proven by its vllm:kv_offload_load_bytes counter"
    result_class = OffloadResult
    acted_on = "load(s) from the CPU tier"

    def judge(self, result: ConsistencyResult, evidence: Mapping[str, Any], server: str) -> tuple[Gate, ...]:
        ref, moved = evidence.get("offload_loads") or (OffloadCount(None, None, None, None, "none"),) * 2
        loaded = gates.offload(moved.load_bytes, ref.load_bytes, moved.source, moved.store_bytes)
        return pressure(result, server), loaded  # beside the pressure gate: the resumed requests' blocks were loaded

    def head_lines(self, prepared: Prepared, preview: Deployment) -> list[str]:
        return servers.part(prepared.options.server, self.name).head_lines(prepared, preview)

    def result_lines(self, result: ConsistencyResult) -> list[str]:
        assert isinstance(result, OffloadResult)
        if not result.offload:  # a run that stopped before its evidence
            return []
        return servers.part(result.server, self.name).result_lines(result)


SCENARIO = Offload()
