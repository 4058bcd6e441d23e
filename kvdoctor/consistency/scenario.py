"""What a consistency run puts under test, one record per scenario.

A scenario says what the pressured ("subject") server must do that the reference does not, and how the run proves
it did: ``preempt`` (forced retraction/preemption, proven by the server's pressure counter), ``prefix-cache`` (the
same prefixes hit in the subject's prefix cache, proven by its hit counter in the pressure gate's place),
``offload`` (preempt's run with a CPU tier the resumed requests load from, proven beside the pressure gate) and
``transfer`` (every request crosses SGLang's PD transfer with nothing retracted, proven by kvdoctor's observer inside
the servers in the pressure gate's place). Which servers run a scenario is each server's own fact
(:attr:`kvdoctor.consistency.servers.Deployment.scenarios`), so a third server adds the scenarios it runs in its own
room; the record holds what a refusal says and which result class carries the scenario's evidence (a preempt run's
JSON keeps exactly its keys).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvdoctor._exceptions import InputError
from kvdoctor.consistency.result import ConsistencyResult, OffloadResult, PrefixCacheResult, TransferResult

PREEMPT = "preempt"
PREFIX_CACHE = "prefix-cache"
OFFLOAD = "offload"
TRANSFER = "transfer"


@dataclass(frozen=True)
class Scenario:
    """One scenario: its name, why it runs only where it does (the refusal's parenthesis), its result class."""

    name: str
    proof: str  # what proves it, said when a server that cannot show it is asked to
    result: type[ConsistencyResult]


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(PREEMPT, "every server retracts or preempts", ConsistencyResult),
    Scenario(
        PREFIX_CACHE,
        "proven per request by the cached tokens each reply reports and by the server's counters: vLLM's "
        "vllm:prefix_cache_hits_total, SGLang's meta_info.cached_tokens and sglang:cached_tokens_total",
        PrefixCacheResult,
    ),
    Scenario(OFFLOAD, "vLLM's OffloadingConnector, proven by its vllm:kv_offload_load_bytes counter", OffloadResult),
    Scenario(
        TRANSFER,
        "SGLang's PD transfer (--topology pd), proven by kvdoctor's observer on the prefill's send and the decode's "
        "commit",
        TransferResult,
    ),
)
NAMES = tuple(s.name for s in SCENARIOS)


def get(name: str) -> Scenario:
    """The scenario NAME; ``InputError`` (exit 2) naming the known ones."""
    for s in SCENARIOS:
        if s.name == name:
            return s
    raise InputError(f"--scenario must be one of {', '.join(NAMES)}, got {name!r}")


def check(name: str, server: str, runs: dict[str, tuple[str, ...]]) -> Scenario:
    """NAME on SERVER, where RUNS says which scenarios each server runs; refused (exit 2) where SERVER cannot."""
    scenario = get(name)
    if name not in runs.get(server, ()):
        where = ", ".join(s for s, names in runs.items() if name in names)
        raise InputError(f"--scenario {name} runs on --server {where} only ({scenario.proof})")
    return scenario
