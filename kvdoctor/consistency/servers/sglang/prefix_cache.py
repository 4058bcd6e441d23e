"""``--scenario prefix-cache --server sglang``: multi-turn conversations hit in SGLang's radix cache, evicted, sent
again; every compared token against a server with the radix cache off.

The workload (:func:`build`): :data:`GROUPS` conversations, each a system prefix of :data:`PREFIX_TOKENS` ids and a
first user turn of ``--prompt-tokens`` ids (turn 1), and follow-ups whose prompt is the whole turn-1 prompt plus
``--prompt-tokens`` more ids (turn 2: a chat client re-sending the history). Five phases, each sent whole before the
next at the workload's concurrency:

1. ``fill``: turn 1 of every conversation (computed; SGLang checkpoints it into its radix tree);
2. ``hit``: half of each conversation's follow-ups (each must read the turn-1 prompt from the cache);
3. ``evict``: unrelated unique prompts, one new token each, enough to overflow the KV pool and, for a recurrent
   model, the recurrent-state slots (:data:`kvdoctor.consistency.deploy.MAMBA_SLOTS`): the tree evicts the cached
   conversations (LRU); not compared;
4. ``refill``: turn 1 again (recomputed after the eviction, checkpointed again);
5. ``warm``: the other follow-ups: the warm second pass, each must hit the refilled checkpoint (sglang#16053 was
   right on a first pass and wrong on the second).

``--requests`` is split over the conversations (at least :data:`MIN_PER_GROUP` each: turn 1, a hit, a warm hit); the
refill adds one compared request per conversation. Why turn 2 extends turn 1's *prompt*: with a recurrent model
(LFM2: ``no_buffer``, the only strategy SGLang serves it with on a CPU, :func:`check`) a hit needs a recurrent state
cached at exactly the matched length, and SGLang 0.5.23 checkpoints one at the end of every prefill
(:data:`PREFILL_CHECKPOINT`: a copy of the live state into a new slot, inserted at the prompt's length) and one at
every request's end (its live slot, :data:`FINISH_CHECKPOINT`); turn 1's prompt is thus a cached state whatever
either server generated, so both servers get the same prompts.

The reference runs ``--disable-radix-cache`` (every token computed); the subject (role ``pressured``) the radix cache
on; both at one pool (:func:`pool_tokens`: everything fill and hit cache, plus every request in flight: nothing is
evicted before the hits and nothing retracts), the same flags otherwise. The hits are proven per request by the
``cached_tokens`` SGLang puts in each reply's ``meta_info`` (:data:`CACHED_TOKENS`) and in total by its
``sglang:cached_tokens_total`` counter (:data:`CACHED_COUNTER`): every ``hit`` and ``warm`` request must have hit, the
reference never.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvdoctor._exceptions import InputError
from kvdoctor.consistency import context_limit, deploy, runnable
from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.prefix import HIT_PHASES, Phase, PrefixWorkload, cached_by_phase
from kvdoctor.consistency.prepared import ConsistencyOptions, Prepared, check_footprint, check_footprint_counts
from kvdoctor.consistency.probe_vllm import PrefixCacheCount, burst_delta, counter, scrape_page
from kvdoctor.consistency.result import ConsistencyResult
from kvdoctor.consistency.scenarios.prefix_cache import PrefixCacheDoc, PrefixCacheResult, phase_hits
from kvdoctor.consistency.servers import Notify, Probe
from kvdoctor.consistency.servers.sglang.part import SglangPart
from kvdoctor.consistency.workload import FIRST_ID, Workload
from kvdoctor.core import faults as registry
from kvdoctor.core.cite import Cite
from kvdoctor.core.faults import StatePath, Target
from kvdoctor.core.sglang.flags import owned_word

GROUPS = 4  # conversations
PREFIX_TOKENS = 32  # each conversation's system prefix
MIN_PER_GROUP = 3  # turn 1, a hit, a warm hit
SUBJECT = "pressured"

# SGLang 0.5.23, where the evidence comes from and why a strategy runs or not.
CACHED_TOKENS = Cite("sglang", "srt/managers/tokenizer_manager.py", "cached_tokens", 2557, 2557)
CACHED_COUNTER = Cite("sglang", "srt/observability/metrics_collector.py", "sglang:cached_tokens_total", 1934, 1938)
COUNTED_WHEN_HIT = Cite("sglang", "srt/observability/metrics_collector.py", "cached_tokens > 0", 2115, 2134)
PREFILL_CHECKPOINT = Cite("sglang", "srt/mem_cache/unified_cache/components/mamba.py", "copy_from", 666, 681)
FINISH_CHECKPOINT = Cite("sglang", "srt/mem_cache/unified_cache/components/mamba.py", "mamba_pool_idx", 640, 646)
AUTO_NO_BUFFER = Cite("sglang", "srt/arg_groups/overrides.py", "no_buffer", 477, 486)
EXTRA_BUFFER_ARCH = Cite("sglang", "srt/arg_groups/mamba_hook.py", "extra_buffer is not supported", 117, 119)
EXTRA_BUFFER_PLATFORM = Cite(
    "sglang", "srt/arg_groups/mamba_hook.py", "_platform_supports_mamba_cache_extra_buffer", 102, 112
)
NEEDS_MAMBA = Cite("sglang", "srt/arg_groups/model_hook.py", "needs mamba state", 1062, 1066)
NO_BUFFER_OVERLAP = Cite("sglang", "srt/arg_groups/mamba_hook.py", "disable_overlap_schedule", 156, 160)

STRATEGY_FLAG = "--mamba-radix-cache-strategy"
CPU_STRATEGIES = ("auto", "no_buffer")  # auto resolves to no_buffer on a CPU (AUTO_NO_BUFFER)
REFUSED_STRATEGIES = ("extra_buffer", "extra_buffer_lazy")
COUNTER = "sglang:cached_tokens_total"
PROMPT_COUNTER = "sglang:prompt_tokens_total"
# Flags the scenario decides: the reference's radix cache off, the subject's on; both without the overlap schedule
# (a no_buffer subject is forced to it, NO_BUFFER_OVERLAP: the reference gets the same schedule).
REFERENCE_ARGS = ("--disable-radix-cache",)
BOTH_ARGS = ("--disable-overlap-schedule",)
OWNED = ("--disable-radix-cache", "--disable-overlap-schedule")


def _flag_value(args: Sequence[str], flag: str) -> str | None:
    """FLAG's last value in ARGS (``--flag v`` or ``--flag=v``; SGLang's argparse keeps the last), or None."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def check(o: ConsistencyOptions, has_recurrent: bool) -> None:
    """``--scenario prefix-cache`` on SGLang: one server pair, no flag the scenario owns, and for a recurrent model a
    radix strategy SGLang serves on this device (exit 2 naming SGLang's file:line)."""
    if o.topology != "single":
        raise InputError(
            f"--scenario prefix-cache --server sglang runs --topology single, got {o.topology!r}: the radix cache "
            "under test is the single server's"
        )
    owned = owned_word((*o.extra_args, *o.subject_args), OWNED)  # SGLang reads aliases and unique prefixes too
    if owned is not None:
        raise InputError(
            f"{owned.typed} after -- is not allowed with --scenario prefix-cache{owned.reading('SGLang')}: the "
            "scenario turns the radix cache off for the reference and on for the subject, both without the overlap "
            "schedule"
        )
    strategy = _flag_value((*o.extra_args, *o.subject_args), STRATEGY_FLAG)
    if strategy in REFUSED_STRATEGIES and not has_recurrent:
        raise InputError(
            f"{STRATEGY_FLAG} {strategy} needs recurrent state, and this model has none: SGLang refuses it at start-up "
            f"({NEEDS_MAMBA.where})"
        )
    if strategy in REFUSED_STRATEGIES and o.device == "cpu":
        raise InputError(
            f"{STRATEGY_FLAG} {strategy} does not run on a CPU: SGLang asserts the model supports it "
            f"({EXTRA_BUFFER_ARCH.where}; LFM2 does not) and the platform can snapshot Mamba state "
            f"({EXTRA_BUFFER_PLATFORM.where}: CUDA, MUSA, NPU, HIP, XPU only); use {' or '.join(CPU_STRATEGIES)} "
            f"(no_buffer, what auto resolves to here: {AUTO_NO_BUFFER.where})"
        )


def served(w: Workload) -> Workload:
    """The workload as the servers see it: the longest prompt is a follow-up (prefix, turn 1, turn 2)."""
    return replace(w, prompt_tokens=PREFIX_TOKENS + 2 * w.prompt_tokens)


def _turn1(w: Workload) -> int:
    return PREFIX_TOKENS + w.prompt_tokens


def split(w: Workload) -> list[tuple[int, int]]:
    """Per conversation: (hit-phase follow-ups, warm-phase follow-ups)."""
    sizes = [w.requests // GROUPS + (g < w.requests % GROUPS) for g in range(GROUPS)]
    return [(math.ceil((n - 1) / 2), n - 1 - math.ceil((n - 1) / 2)) for n in sizes]


def pool_tokens(w: Workload) -> int:
    """Both servers' ``--max-total-tokens``: every token fill and hit leave cached, plus every request in flight
    at its longest and one spare: nothing is evicted before its hit and nothing retracts."""
    longest = served(w).per_request_tokens
    cached = GROUPS * (_turn1(w) + w.max_new_tokens) + sum(h for h, _ in split(w)) * (
        w.prompt_tokens + w.max_new_tokens
    )
    return cached + (w.in_flight + 1) * longest


def evict_requests(w: Workload, pool: int, has_recurrent: bool) -> int:
    """Unique one-token prompts of turn 1's length whose tokens (and, for a recurrent model, whose recurrent-state
    checkpoints, one slot each) overflow the pool, plus one concurrent wave."""
    need = math.ceil(pool / _turn1(w))
    if has_recurrent:
        need = max(need, deploy.MAMBA_SLOTS)
    return need + w.in_flight


def build(w: Workload, vocab_size: int, has_recurrent: bool) -> PrefixWorkload:
    """The five phases for W."""
    if w.requests < GROUPS * MIN_PER_GROUP:
        raise InputError(
            f"--scenario prefix-cache needs --requests >= {GROUPS * MIN_PER_GROUP} ({GROUPS} conversations, each "
            f"a first turn, a follow-up that hits it and a follow-up after the eviction), got {w.requests}"
        )
    if vocab_size <= FIRST_ID:
        raise InputError(f"vocab_size {vocab_size} leaves no ordinary token ids (ids below {FIRST_ID} are special)")
    rng = random.Random(f"kvdoctor-sglang-prefix-cache-{w.seed}")

    def ids(n: int) -> tuple[int, ...]:
        return tuple(rng.randrange(FIRST_ID, vocab_size) for _ in range(n))

    turn1 = [ids(PREFIX_TOKENS) + ids(w.prompt_tokens) for _ in range(GROUPS)]
    rows: dict[str, list[tuple[int, tuple[int, ...]]]] = {"hit": [], "warm": []}
    for g, (hits, warms) in enumerate(split(w)):
        rows["hit"] += [(g, turn1[g] + ids(w.prompt_tokens)) for _ in range(hits)]
        rows["warm"] += [(g, turn1[g] + ids(w.prompt_tokens)) for _ in range(warms)]
    evict = tuple(ids(_turn1(w)) for _ in range(evict_requests(w, pool_tokens(w), has_recurrent)))
    first = tuple(range(GROUPS))

    def phase(name: str) -> Phase:
        return Phase(name, tuple(p for _, p in rows[name]), tuple(g for g, _ in rows[name]), w.max_new_tokens, True)

    return PrefixWorkload(
        GROUPS,
        PREFIX_TOKENS,
        1,  # SGLang's radix tree on a CPU: page size 1 (a hybrid's no_buffer needs it)
        (
            Phase("fill", tuple(turn1), first, w.max_new_tokens, True),
            phase("hit"),
            Phase("evict", evict, (-1,) * len(evict), 1, False),
            Phase("refill", tuple(turn1), first, w.max_new_tokens, True),
            phase("warm"),
        ),
    )


def from_prometheus(text: str) -> tuple[int | None, int | None]:
    """(cached tokens, prompt tokens) in an SGLang ``/metrics`` page, summed over labels. SGLang counts cached tokens
    only for a request that hit (COUNTED_WHEN_HIT), so its series is born at the first hit: a page that counts
    prompt tokens and has no cached-token sample has served 0 from the cache; a page without either is unknown."""
    prompt = counter(text, PROMPT_COUNTER, "prompt tokens", declared_is_zero=True)
    cached = counter(text, COUNTER, "cached tokens", declared_is_zero=True)
    if cached is None and prompt is not None:
        cached = 0
    return cached, prompt


class CachedTokensProbe:
    """Before/after a burst: ``sglang:cached_tokens_total``'s delta (and the prompt tokens'), or unknown."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.before: tuple[int | None, int | None] = (None, None)

    def _scrape(self, timeout_s: float) -> tuple[int | None, int | None]:
        return scrape_page(self.url, from_prometheus, (None, None), timeout_s)

    def start(self, timeout_s: float = 10.0) -> None:
        self.before = self._scrape(timeout_s)

    def finish(self, timeout_s: float = 10.0) -> PrefixCacheCount:
        after = self._scrape(timeout_s)
        hits = burst_delta(COUNTER, self.before[0], after[0], "cached tokens")
        queries = burst_delta(PROMPT_COUNTER, self.before[1], after[1], "prompt tokens")
        return PrefixCacheCount(hits, queries, "metrics" if hits is not None else "none")


def record(
    result: PrefixCacheResult,
    pw: PrefixWorkload,
    reference: PrefixCacheCount,
    subject: PrefixCacheCount,
    got: list[Generation],
    strategy: str | None,
) -> PrefixCacheResult:
    """RESULT with the radix cache's evidence: both servers' counters, the subject's cached tokens per compared
    request and per phase, the radix strategy per role, and a warning when the eviction wave evicted nothing."""
    phases = pw.compared_phases
    cached = [g.cached_tokens for g in got]
    refill = [c for ph, c in zip(phases, cached, strict=True) if ph == "refill" and c is not None]
    recomputed = sum(c < pw.prefix_tokens for c in refill) if refill else None
    evidence: PrefixCacheDoc = {
        "workload": pw.to_dict(),
        "hits": {"reference": reference.hits, SUBJECT: subject.hits},
        "queries": {"reference": reference.queries, SUBJECT: subject.queries},
        "source": subject.source if subject.source == reference.source else f"{reference.source}/{subject.source}",
        "mamba_cache_mode": {"reference": None, SUBJECT: strategy},
        "server_cache_config": {"reference": {"radix_cache": "disabled"}, SUBJECT: {"radix_cache": "enabled"}},
        "request_phases": phases,
        "cached_tokens": cached,
        "by_phase": cached_by_phase(phases, cached),
        "recomputed_after_eviction": recomputed,
    }
    warnings = []
    if recomputed == 0:
        warnings.append("the eviction wave evicted no conversation: every refill read its system prefix from the cache")
    if any(c is None for ph, c in zip(phases, cached, strict=True) if ph in HIT_PHASES):
        warnings.append("a hit-phase reply carried no meta_info.cached_tokens: that every one hit is not gated")
    return replace(result, prefix_cache=evidence, warnings=[*result.warnings, *warnings])


def strategy(extra_args: Sequence[str], has_recurrent: bool) -> str | None:
    """The subject's radix strategy for a recurrent model (what ``auto`` resolves to on a CPU), else None."""
    if not has_recurrent:
        return None
    chosen = _flag_value(extra_args, STRATEGY_FLAG) or "auto"
    return "no_buffer" if chosen == "auto" else chosen


def pools(w: Workload) -> tuple[int, int]:
    """(reference, subject) ``--max-total-tokens``: one pool (:func:`pool_tokens`)."""
    pool = pool_tokens(w)
    return pool, pool


ROLE_ARGS: dict[str, tuple[str, ...]] = {"reference": (*BOTH_ARGS, *REFERENCE_ARGS), SUBJECT: BOTH_ARGS}


def bound(prepared: Prepared, plan: Callable[[Prepared], deploy.Deployment]) -> Prepared:
    """The context and this machine checked for the longest request and the eviction wave, then the phases."""
    o, w = prepared.options, prepared.options.workload
    limit = context_limit.sglang(prepared.config, prepared.source, o.extra_args)
    context_limit.check(limit, w.prompt_tokens, w.max_new_tokens, "sglang", _turn1(w))
    evict = evict_requests(w, pool_tokens(w), prepared.kind.has_recurrent)
    check_footprint_counts(prepared, requests=w.requests + GROUPS + evict, prompt_tokens=served(w).prompt_tokens)
    phased = build(w, prepared.vocab_size, prepared.kind.has_recurrent)
    prepared = replace(prepared, prefix=phased)
    check_footprint(prepared, plan(prepared))
    return replace(prepared, prompts=phased.compared)


def recorded(
    result: ConsistencyResult,
    prepared: Prepared,
    evidence: Mapping[str, Mapping[str, Any]],
    got: list[Generation],
    say: Callable[[str, str], None],
) -> tuple[ConsistencyResult, dict[str, Any]]:
    """The room's ``record``: RESULT with the evidence (:func:`record`) and ``evaluate``'s ``prefix_hits``."""
    ref, press = evidence.get("reference", {}), evidence.get(SUBJECT, {})
    if "prefix_cache" not in ref or "prefix_cache" not in press or prepared.prefix is None:
        return result, {}
    counts = (ref["prefix_cache"], press["prefix_cache"])
    if isinstance(result, PrefixCacheResult):
        o = prepared.options
        result = record(
            result,
            prepared.prefix,
            *counts,
            got,
            strategy((*o.extra_args, *o.subject_args), prepared.kind.has_recurrent),
        )
        phases = result.prefix_cache.get("by_phase", {})
        hit = {name: phases.get(name, {}).get("hit_requests") for name in HIT_PHASES}
        say("compare", f"radix-cache hit tokens: reference {counts[0].hits}, pressured {counts[1].hits}; hits {hit}")
    return result, {"prefix_hits": counts}


def _hit_faults() -> tuple[str, ...]:
    return registry.names(server="sglang", target=Target.SERVER, path=StatePath.PREFIX_HIT)


class PrefixCache(SglangPart):
    """SGLang's part of ``--scenario prefix-cache``: the radix cache."""

    name = "prefix-cache"

    def check_model(self, o: ConsistencyOptions, kind: runnable.ModelKind) -> None:
        check(o, kind.has_recurrent)

    def needs(self, name: str, scenario: str) -> str:
        """A radix-hit fault needs this scenario, the only one whose requests hit the cache by design."""
        return (
            f"--inject {name} acts on a radix-cache hit: it needs --scenario prefix-cache (the only scenario whose "
            "requests hit the cache by design)"
        )

    def refuses(self, name: str) -> str:
        """Nothing retracts or transfers here: any other fault would never fire."""
        return (
            f"--inject {name} does not act on a radix-cache hit, and nothing retracts or transfers under --scenario "
            f"prefix-cache: it would never fire; choose one of {', '.join(_hit_faults())}"
        )

    def plan(self, o: ConsistencyOptions) -> deploy.ScenarioPlan:
        """One pool for both servers; the reference's radix cache off, both without the overlap schedule."""
        return deploy.ScenarioPlan(pools=pools(o.workload), role_args=ROLE_ARGS)

    def bound(self, prepared: Prepared, plan: Callable[[Prepared], deploy.Deployment]) -> Prepared:
        return bound(prepared, plan)

    def probes(self, prepared: Prepared, url: str) -> dict[str, Probe]:
        return {"prefix_cache": CachedTokensProbe(url)}

    def record(
        self,
        result: ConsistencyResult,
        prepared: Prepared,
        evidence: Mapping[str, Mapping[str, Any]],
        got: list[Generation],
        say: Notify,
        site_log: Path,
    ) -> tuple[ConsistencyResult, dict[str, Any]]:
        return recorded(result, prepared, evidence, got, say)

    def head_lines(self, prepared: Prepared, preview: deploy.Deployment) -> list[str]:
        pw, w = prepared.prefix, prepared.options.workload
        if pw is None:
            return []
        phases = ", ".join(f"{ph.name} {len(ph.prompts)}" for ph in pw.phases)
        return [
            f"scenario: prefix-cache: {pw.groups} conversations (a {pw.prefix_tokens}-id system prefix + "
            f"{w.prompt_tokens} ids of turn 1; each follow-up is turn 1 + {w.prompt_tokens} ids); phases {phases} "
            "(evict: unique prompts, 1 new token, not compared); reference --disable-radix-cache, pressured the "
            f"radix cache on; hits from each reply's meta_info.cached_tokens and {COUNTER}"
        ]

    def result_lines(self, result: ConsistencyResult) -> list[str]:
        """The radix cache's counts, the hit-phase requests that hit, and each server's radix cache."""
        assert isinstance(result, PrefixCacheResult)
        cache = result.prefix_cache
        hits, queries = cache["hits"], cache["queries"]
        served = ", ".join(
            f"{role} {(config or {}).get('radix_cache', '?')}" for role, config in cache["server_cache_config"].items()
        )
        chosen = cache["mamba_cache_mode"].get(SUBJECT)
        strategy = f"; recurrent-state strategy ({STRATEGY_FLAG}): {SUBJECT} {chosen}" if chosen else ""
        return [
            f"radix-cache hit tokens: reference {hits['reference']}, {SUBJECT} {hits[SUBJECT]} of "
            f"{queries[SUBJECT]} prompt tokens (from {cache['source']}: {COUNTER}); requests that hit "
            f"(meta_info.cached_tokens), per phase: {phase_hits(cache)}; recomputed after eviction: "
            f"{cache['recomputed_after_eviction']}; radix cache: {served}{strategy}"
        ]


PART = PrefixCache()
