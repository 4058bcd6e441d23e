"""``--scenario prefix-cache`` (``--server vllm``): the same prefixes sent again, hit in vLLM's prefix cache, and
again after an eviction wave; every compared token against a server that computes every token.

The workload: :data:`GROUPS` groups of prompts, each group one shared prefix of :data:`PREFIX_BLOCKS` whole vLLM
blocks followed by ``--prompt-tokens`` distinct ids (seeded, drawn apart from the preempt scenario's prompts and
the warm-up's, so nothing is cached before the run). Four phases, each sent whole before the next, at the
workload's concurrency:

1. ``fill``: one request per group (the prefix blocks are computed and cached);
2. ``hit``: half of each group's other requests (their prefix blocks come from the cache: cached tokens > 0);
3. ``evict``: unrelated unique prompts of the same length, one new token each (vLLM allocates the prompt's
   blocks only: the request finishes on its first token), enough to allocate more blocks than the pool holds, so
   vLLM's block pool evicts the cached prefixes (``BlockPool``'s free queue is LRU); not compared (they exist to
   evict);
4. ``again``: the rest of each group (a group's first request recomputes the evicted prefix, the others may hit
   it again).

``fill``, ``hit`` and ``again`` are the compared requests, in that order (the JSON's request indexes). The
reference serves them with ``--no-enable-prefix-caching`` (every token computed), the subject (role
``pressured``) with prefix caching on; both at the same pool, flags and concurrency. vLLM's prefix-cache counters
(:mod:`kvdoctor.consistency.probe_vllm`) prove the hits: the subject must hit (> 0 tokens) and the reference not.
Pure: nothing here starts or sends.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from kvdoctor._exceptions import InputError
from kvdoctor.consistency.workload import FIRST_ID, Workload

GROUPS = 4  # distinct prefixes
PREFIX_BLOCKS = 4  # a prefix is this many whole vLLM blocks (128 tokens in the CPU's 32-token blocks)
MIN_PER_GROUP = 3  # fill, hit, again
# The compared phases whose every request must hit the subject's cache (vLLM: hit; SGLang also warm, its second pass:
# kvdoctor.consistency.servers.sglang.prefix_cache).
HIT_PHASES = ("hit", "warm")


@dataclass(frozen=True)
class Phase:
    """One send of a phase's prompts, whole, before the next phase starts."""

    name: str  # fill, hit, evict, again
    prompts: tuple[tuple[int, ...], ...]
    groups: tuple[int, ...]  # each prompt's prefix group; -1 for an eviction prompt (no shared prefix)
    max_new_tokens: int
    compared: bool

    def workload(self, w: Workload) -> Workload:
        return replace(w, requests=len(self.prompts), max_new_tokens=self.max_new_tokens)


@dataclass(frozen=True)
class PrefixWorkload:
    groups: int
    prefix_tokens: int
    block_size: int
    phases: tuple[Phase, ...]

    @property
    def compared(self) -> list[list[int]]:
        """The compared prompts in phase order (what the reference and the subject are compared on)."""
        return [list(p) for ph in self.phases if ph.compared for p in ph.prompts]

    @property
    def compared_phases(self) -> list[str]:
        """Each compared request's phase, in the same order as :attr:`compared`."""
        return [ph.name for ph in self.phases if ph.compared for _ in ph.prompts]

    def to_dict(self) -> dict[str, object]:
        return {
            "groups": self.groups,
            "prefix_tokens": self.prefix_tokens,
            "prefix_blocks": self.prefix_tokens // self.block_size,
            "block_size": self.block_size,
            "phases": [
                {
                    "name": ph.name,
                    "requests": len(ph.prompts),
                    "max_new_tokens": ph.max_new_tokens,
                    "compared": ph.compared,
                }
                for ph in self.phases
            ],
        }


def prefix_tokens(block_size: int) -> int:
    return PREFIX_BLOCKS * block_size


def served(w: Workload, block_size: int) -> Workload:
    """The workload as the servers see it: every prompt is the prefix plus ``--prompt-tokens`` ids."""
    return replace(w, prompt_tokens=prefix_tokens(block_size) + w.prompt_tokens)


def evict_requests(w: Workload, block_size: int, pool_blocks: int) -> int:
    """Unique one-token requests whose blocks together exceed the pool (every older cached block is evicted),
    plus one concurrent wave (vLLM frees a finished request's blocks to the LRU tail, where they wait). Each holds
    its prompt's blocks only: with one new token vLLM schedules the prompt (``allocate_slots`` for its tokens) and
    the request finishes on the token that step samples, never allocating for it."""
    per = math.ceil(served(w, block_size).prompt_tokens / block_size)
    return math.ceil(pool_blocks / per) + w.in_flight


def phase_requests(w: Workload) -> dict[str, int]:
    """How many requests fill, hit and again get (as :func:`build` splits ``--requests`` over the groups)."""
    sizes = [w.requests // GROUPS + (g < w.requests % GROUPS) for g in range(GROUPS)]
    hits = [_hits(n) for n in sizes]
    return {"fill": GROUPS, "hit": sum(hits), "again": sum(n - 1 - h for n, h in zip(sizes, hits, strict=True))}


def _hits(members: int) -> int:
    """A group's hit-phase requests: half of those after its fill request (rounded up); the rest come again."""
    return math.ceil((members - 1) / 2)


def pool_blocks(w: Workload, per_request: int, shared: int) -> int:
    """The one pool both servers get, in blocks: the larger of the concurrent demand plus one request spare (nothing
    preempts) and every block the fill and hit phases allocate, none reused: the fill requests' whole blocks and
    each hit request's blocks beyond the SHARED prefix blocks it reads from the cache. vLLM's ``BlockPool`` hands
    out never-used blocks before freed ones (its free queue is LRU, a freed block joins at the tail), so no cached
    prefix is evicted before every hit-phase request has read it, at any --concurrency. + 1: the null block."""
    n = phase_requests(w)
    demand = w.in_flight * per_request + per_request
    before_again = n["fill"] * per_request + n["hit"] * (per_request - shared)
    return max(demand, before_again) + 1


def build(w: Workload, vocab_size: int, block_size: int, pool_blocks: int) -> PrefixWorkload:
    """The four phases for W on a pool of POOL_BLOCKS blocks of BLOCK_SIZE tokens."""
    if w.requests < GROUPS * MIN_PER_GROUP:
        raise InputError(
            f"--scenario prefix-cache needs --requests >= {GROUPS * MIN_PER_GROUP} ({GROUPS} prefix groups, each "
            f"one fill, hit and after-eviction request), got {w.requests}"
        )
    if vocab_size <= FIRST_ID:
        raise InputError(f"vocab_size {vocab_size} leaves no ordinary token ids (ids below {FIRST_ID} are special)")
    rng = random.Random(f"kvdoctor-prefix-cache-{w.seed}")

    def ids(n: int) -> tuple[int, ...]:
        return tuple(rng.randrange(FIRST_ID, vocab_size) for _ in range(n))

    plen = prefix_tokens(block_size)
    prefixes = [ids(plen) for _ in range(GROUPS)]
    members: list[list[tuple[int, ...]]] = [[] for _ in range(GROUPS)]
    for i in range(w.requests):
        members[i % GROUPS].append(prefixes[i % GROUPS] + ids(w.prompt_tokens))
    split: dict[str, list[tuple[int, tuple[int, ...]]]] = {"fill": [], "hit": [], "again": []}
    for g, prompts in enumerate(members):
        hit = _hits(len(prompts))
        split["fill"].append((g, prompts[0]))
        split["hit"] += [(g, p) for p in prompts[1 : 1 + hit]]
        split["again"] += [(g, p) for p in prompts[1 + hit :]]
    evict = tuple(ids(plen + w.prompt_tokens) for _ in range(evict_requests(w, block_size, pool_blocks)))

    def phase(name: str) -> Phase:
        rows = split[name]
        return Phase(name, tuple(p for _, p in rows), tuple(g for g, _ in rows), w.max_new_tokens, True)

    return PrefixWorkload(
        GROUPS,
        plen,
        block_size,
        (phase("fill"), phase("hit"), Phase("evict", evict, (-1,) * len(evict), 1, False), phase("again")),
    )


def cached_by_phase(phases: list[str], cached: list[int | None]) -> dict[str, dict[str, int | None]]:
    """Per compared phase: requests, those the server reported cached tokens for, and the cached tokens (None when
    the server's replies carry no ``usage.prompt_tokens_details``)."""
    out: dict[str, dict[str, int | None]] = {}
    for name in dict.fromkeys(phases):
        got = [c for p, c in zip(phases, cached, strict=True) if p == name]
        known = [c for c in got if c is not None]
        out[name] = {
            "requests": len(got),
            "hit_requests": sum(c > 0 for c in known) if known else None,
            "cached_tokens": sum(known) if known else None,
        }
    return out
