"""``--scenario prefix-cache``: the same prefixes hit in the subject's prefix cache, evicted, sent again, every
compared token against a server that computes every token.

Shared by every server that runs it: the result (:class:`PrefixCacheResult`, the ``prefix_cache`` evidence beside
preempt's keys), the gate in the pressure gate's place (nothing must preempt there; the subject's prefix cache must
serve tokens, and every hit-phase request must have hit where the replies said so: :func:`kvdoctor.consistency.
gates.prefix_hits`). The workload, the plan, the counters and the words are each server's own part
(``consistency/servers/<server>/prefix_cache.py``: vLLM's prefix caching, SGLang's radix cache).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from kvdoctor.consistency import gates, servers
from kvdoctor.consistency.gates import Gate
from kvdoctor.consistency.prefix import HIT_PHASES
from kvdoctor.consistency.probe_vllm import PrefixCacheCount
from kvdoctor.consistency.result import ConsistencyResult

if TYPE_CHECKING:
    from kvdoctor.consistency.deploy import Deployment
    from kvdoctor.consistency.prepared import Prepared

__all__ = ["SCENARIO", "PrefixCacheDoc", "PrefixCacheEvidence", "PrefixCacheResult", "hit_phase", "phase_hits"]


class PrefixCacheDoc(TypedDict, total=False):
    """``--scenario prefix-cache``'s evidence (each server's part writes it: ``record`` in
    ``consistency/servers/<server>/prefix_cache.py``)."""

    workload: dict[str, Any]
    hits: dict[str, int | None]  # per role, from the server's hit counter
    queries: dict[str, int | None]
    source: str
    mamba_cache_mode: dict[str, str | None]
    server_cache_config: dict[str, dict[str, str] | None]
    request_phases: list[str]
    cached_tokens: list[int | None]
    by_phase: dict[str, dict[str, int | None]]
    recomputed_after_eviction: int | None


@dataclass(frozen=True)
class PrefixCacheResult(ConsistencyResult):
    """``--scenario prefix-cache``: the same result plus the scenario and its prefix-cache evidence (a separate
    class, so a preempt run's JSON, and pd-eval's that embeds one, keep exactly their keys)."""

    scenario: str = "prefix-cache"
    # workload (groups, prefix, phases), hits/queries per role from /metrics, mamba cache mode per role, the
    # subject's cached tokens per compared request (usage.prompt_tokens_details) and per phase
    prefix_cache: PrefixCacheDoc = field(default_factory=PrefixCacheDoc)

    def evidence(self) -> str:
        """The subject's prefix-cache hit tokens (this scenario's evidence in the preemptions' place)."""
        hits = (self.prefix_cache.get("hits") or {}).get("pressured")
        return f"{hits if hits is not None else '?'} prefix-cache hit tokens"


class PrefixCacheEvidence(TypedDict, total=False):
    """What a server's ``record`` finds for the gate: both servers' counts (reference, subject)."""

    prefix_hits: tuple[PrefixCacheCount, PrefixCacheCount]


def hit_phase(doc: PrefixCacheDoc) -> dict[str, int | None] | None:
    """The hit phases' requests (``prefix.HIT_PHASES``) and those that read cached tokens, when the subject said it
    for every one."""
    rows = zip(doc.get("request_phases") or [], doc.get("cached_tokens") or [], strict=False)
    hit = [c for ph, c in rows if ph in HIT_PHASES]
    if not hit or any(c is None for c in hit):
        return None
    return {"requests": len(hit), "hit_requests": sum(c > 0 for c in hit)}


def phase_hits(doc: PrefixCacheDoc) -> str:
    """Per compared phase, the requests that hit of those sent (``fill 0/4, hit 4/4``; ``?`` when unknown)."""
    return ", ".join(
        f"{name} {row['hit_requests'] if row['hit_requests'] is not None else '?'}/{row['requests']}"
        for name, row in doc["by_phase"].items()
    )


class PrefixCache:
    name = "prefix-cache"
    proof = (
        "proven per request by the cached tokens each reply reports and by the server's counters: vLLM's "
        "vllm:prefix_cache_hits_total, SGLang's meta_info.cached_tokens and sglang:cached_tokens_total"
    )
    result_class = PrefixCacheResult
    acted_on = "prefix-cache hit request(s)"

    def judge(self, result: ConsistencyResult, evidence: Mapping[str, Any], server: str) -> tuple[Gate, ...]:
        assert isinstance(result, PrefixCacheResult)
        ref, subject = evidence.get("prefix_hits") or (PrefixCacheCount(None, None, "none"),) * 2
        source = subject.source if subject.source == ref.source else "none"
        return (gates.prefix_hits(subject.hits, ref.hits, source, hit_phase(result.prefix_cache)),)

    def head_lines(self, prepared: Prepared, preview: Deployment) -> list[str]:
        return servers.part(prepared.options.server, self.name).head_lines(prepared, preview)

    def result_lines(self, result: ConsistencyResult) -> list[str]:
        assert isinstance(result, PrefixCacheResult)
        if not result.prefix_cache:  # a run that stopped before its evidence
            return []
        return servers.part(result.server, self.name).result_lines(result)


SCENARIO = PrefixCache()
