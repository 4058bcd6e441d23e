"""How many times a vLLM server preempted a request: ``vllm:num_preemptions_total`` from ``/metrics``; and, for
``--scenario prefix-cache``, how many prompt tokens its prefix cache served (:class:`PrefixCacheProbe`).

vLLM 0.32 counts every preemption its scheduler makes in that counter (``v1/metrics/loggers.py``,
``PrometheusStatLogger``: ``vllm:num_preemptions``, one sample per engine, labels ``model_name`` and
``engine``), served at ``/metrics`` by default. There is no per-request signal and no log fallback: a page
without the counter is an unknown count (``none``), which the pressure gate turns red, never "0 preemptions".
The same before/after shape as SGLang's probe (:class:`kvdoctor.deploy.metrics.RetractionProbe`), the same
guards: a sample that is no count is malformed, a count that went backwards means the server restarted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from kvdoctor.deploy.metrics import (
    CounterWentBackwards,
    RetractionCount,
    checked_count,
    scrape_with,
)

COUNTER = "vllm:num_preemptions_total"
FAMILY = COUNTER.removesuffix("_total")
# vLLM 0.32 v1/metrics/loggers.py, PrometheusStatLogger.__init__ (counter_prefix_cache_queries / _hits, lines
# 661-679), incremented from SchedulerStats.prefix_cache_stats in record() (1167-1171): prompt tokens looked up
# in the prefix cache and tokens found there, for requests seen for the first time (a resumed preempted request is
# counted apart, PrefixCacheStats.record, v1/metrics/stats.py:138-151).
HITS = "vllm:prefix_cache_hits_total"
QUERIES = "vllm:prefix_cache_queries_total"
# The server's own cache config as labels of one info gauge (loggers.py:1120, log_metrics_info("cache_config")):
# enable_prefix_caching and the mamba_cache_mode vLLM resolved (MambaModelConfig set 'align' or 'none').
CACHE_CONFIG = "vllm:cache_config_info"
CACHE_CONFIG_LABELS = ("enable_prefix_caching", "mamba_cache_mode")


def counter(text: str, name: str, what: str, *, declared_is_zero: bool = False) -> int | None:
    """Counter NAME (``..._total``) in a vLLM ``/metrics`` page, summed over engines; None when the page has none.
    DECLARED_IS_ZERO: a family the page declares (HELP/TYPE) without one sample reads 0, for a labelled counter whose
    series vLLM creates only at its first increment (the offload counters); a page without the family stays None."""
    from prometheus_client.parser import text_string_to_metric_families

    family_name = name.removesuffix("_total")
    total = 0.0
    found = False
    for family in text_string_to_metric_families(text):
        if family.name != family_name:
            continue
        found = found or declared_is_zero
        for sample in family.samples:
            if sample.name != name:
                continue
            found = True
            total += checked_count(sample.value, name, what)
    return int(checked_count(total, name, what)) if found else None  # finite samples can add up to +Inf


def from_prometheus(text: str) -> int | None:
    """The preemption count in a vLLM ``/metrics`` page (summed over engines); None when the page has none."""
    return counter(text, COUNTER, "preemptions")


def scrape(base_url: str, timeout_s: float = 10.0) -> int | None:
    """The preemption count from ``GET {base_url}/metrics``; None when unreachable, off, or absent."""
    return scrape_with(base_url, from_prometheus, f"{base_url}/metrics", timeout_s)


class PreemptionProbe:
    """Before/after a burst: the counter's delta (``metrics``), or unknown (``none``)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.before: int | None = None

    def start(self, timeout_s: float = 10.0) -> None:
        self.before = scrape(self.url, timeout_s)

    def finish(self, timeout_s: float = 10.0) -> RetractionCount:
        delta = burst_delta(COUNTER, self.before, scrape(self.url, timeout_s), "preemptions")
        return RetractionCount(delta, "metrics" if delta is not None else "none")


def burst_delta(name: str, before: int | None, after: int | None, what: str) -> int | None:
    """Counter NAME's growth over a burst (None when either side is unknown); a counter that went backwards is
    refused (the server restarted or reset it), never read as a smaller count of WHAT."""
    if before is None or after is None:
        return None
    if after < before:
        raise CounterWentBackwards(
            f"{name} went backwards during the burst ({before} before it, {after} after): the server restarted or "
            f"the counter was reset, so this burst's {what} cannot be counted"
        )
    return after - before


@dataclass(frozen=True)
class PrefixCacheCount:
    """A burst's prefix-cache lookups and hits in tokens (None: unknown, the page had no such counter)."""

    hits: int | None
    queries: int | None
    source: str  # metrics, or none
    config: dict[str, str] | None = None  # the server's cache_config_info labels (CACHE_CONFIG_LABELS), when served


Scraped = tuple[int | None, int | None, dict[str, str] | None]
_Read = TypeVar("_Read")  # what one reader takes from a /metrics page


def cache_config(text: str) -> dict[str, str] | None:
    """The server's resolved cache config (:data:`CACHE_CONFIG_LABELS` of ``vllm:cache_config_info``), or None."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        if family.name == CACHE_CONFIG.removesuffix("_info") or family.name == CACHE_CONFIG:
            for sample in family.samples:
                return {k: sample.labels[k] for k in CACHE_CONFIG_LABELS if k in sample.labels}
    return None


def prefix_cache_from_prometheus(text: str) -> Scraped:
    """(hits, queries, cache config) in a vLLM ``/metrics`` page; a None where the page lacks one."""
    return counter(text, HITS, "prefix-cache hits"), counter(text, QUERIES, "prefix-cache queries"), cache_config(text)


def scrape_page(base_url: str, read: Callable[[str], _Read], unknown: _Read, timeout_s: float = 10.0) -> _Read:
    """READ of ``GET {base_url}/metrics`` (the shared :func:`~kvdoctor.deploy.metrics.scrape_with`: a malformed counter
    raises naming the page); UNKNOWN when the server is unreachable, off, or the page unreadable."""
    got: list[_Read] = []

    def parse(text: str) -> int | None:
        got.append(read(text))
        return 0

    scrape_with(base_url, parse, f"{base_url}/metrics", timeout_s)
    return got[0] if got else unknown


def scrape_prefix_cache(base_url: str, timeout_s: float = 10.0) -> Scraped:
    """(hits, queries, cache config) from ``GET {base_url}/metrics``; all None when unreachable or off."""
    return scrape_page(base_url, prefix_cache_from_prometheus, (None, None, None), timeout_s)


class PrefixCacheProbe:
    """Before/after a burst: the prefix-cache counters' deltas, or unknown (``none``), never a made-up 0."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.before: Scraped = (None, None, None)

    def start(self, timeout_s: float = 10.0) -> None:
        self.before = scrape_prefix_cache(self.url, timeout_s)

    def finish(self, timeout_s: float = 10.0) -> PrefixCacheCount:
        after = scrape_prefix_cache(self.url, timeout_s)
        hits = burst_delta(HITS, self.before[0], after[0], "prefix-cache hits")
        queries = burst_delta(QUERIES, self.before[1], after[1], "prefix-cache queries")
        return PrefixCacheCount(hits, queries, "metrics" if hits is not None else "none", after[2])


# --scenario offload: vLLM's OffloadingConnector counts the bytes its worker moved (distributed/kv_transfer/
# kv_connector/v1/offloading/metrics.py, _TransferMetricName, lines 22-30 in vLLM 0.32 (0.33: 39-47): counters
# "vllm:kv_offload_load_bytes" (CPU -> GPU) and "vllm:kv_offload_store_bytes" (GPU -> CPU), created by
# OffloadPromMetrics._create_metric as prometheus_client Counters, so the page says them with "_total"), fed from
# each finished transfer's size (offloading/scheduler.py:1910-1935, update_connector_output, 0.32). The
# scheduler's hits on the connector's tier: "vllm:external_prefix_cache_hits" / "_queries"
# (v1/metrics/loggers.py:685-706, 0.32).
OFFLOAD_LOAD_BYTES = "vllm:kv_offload_load_bytes_total"
OFFLOAD_STORE_BYTES = "vllm:kv_offload_store_bytes_total"
EXTERNAL_HITS = "vllm:external_prefix_cache_hits_total"
EXTERNAL_QUERIES = "vllm:external_prefix_cache_queries_total"
OFFLOAD_COUNTERS = (OFFLOAD_LOAD_BYTES, OFFLOAD_STORE_BYTES, EXTERNAL_HITS, EXTERNAL_QUERIES)


@dataclass(frozen=True)
class OffloadCount:
    """A burst's OffloadingConnector traffic (None: unknown, the page had no such counter, as on a server without
    the connector)."""

    load_bytes: int | None
    store_bytes: int | None
    external_hits: int | None
    external_queries: int | None
    source: str  # metrics (the load counter was on the page before and after), or none

    def to_dict(self) -> dict[str, int | None]:
        return {
            "load_bytes": self.load_bytes,
            "store_bytes": self.store_bytes,
            "external_prefix_cache_hits": self.external_hits,
            "external_prefix_cache_queries": self.external_queries,
        }


def offload_from_prometheus(text: str) -> tuple[int | None, ...]:
    """:data:`OFFLOAD_COUNTERS` in a vLLM ``/metrics`` page (summed over engines), a None where the page lacks one."""
    # vLLM 0.32 offloading/metrics.py:404-424 (0.33: 475-491): the per-engine series of each offload counter is made
    # at its first load or store, so before any the page declares the family with no sample: 0, not unknown.
    return tuple(counter(text, n, n.removeprefix("vllm:"), declared_is_zero=True) for n in OFFLOAD_COUNTERS)


def scrape_offload(base_url: str, timeout_s: float = 10.0) -> tuple[int | None, ...]:
    """:func:`offload_from_prometheus` of ``GET {base_url}/metrics``; all None when unreachable or off."""
    return scrape_page(base_url, offload_from_prometheus, (None,) * len(OFFLOAD_COUNTERS), timeout_s)


class OffloadProbe:
    """Before/after a burst: the offload counters' deltas, or unknown (``none``), never a made-up 0."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.before: tuple[int | None, ...] = (None,) * len(OFFLOAD_COUNTERS)

    def start(self, timeout_s: float = 10.0) -> None:
        self.before = scrape_offload(self.url, timeout_s)

    def finish(self, timeout_s: float = 10.0) -> OffloadCount:
        after = scrape_offload(self.url, timeout_s)
        rows = zip(OFFLOAD_COUNTERS, self.before, after, strict=True)
        deltas = [burst_delta(n, b, a, n.removeprefix("vllm:")) for n, b, a in rows]
        return OffloadCount(*deltas, source="metrics" if deltas[0] is not None else "none")
