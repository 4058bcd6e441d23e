"""How many times a vLLM server preempted a request: ``vllm:num_preemptions_total`` from ``/metrics``.

vLLM 0.32 counts every preemption its scheduler makes in that counter (``v1/metrics/loggers.py``,
``PrometheusStatLogger``: ``vllm:num_preemptions``, one sample per engine, labels ``model_name`` and
``engine``), served at ``/metrics`` by default. There is no per-request signal and no log fallback: a page
without the counter is an unknown count (``none``), which the pressure gate turns red, never "0 preemptions".
The same before/after shape as SGLang's probe (:class:`kvdoctor.pd.metrics.RetractionProbe`), the same
guards: a sample that is no count is malformed, a count that went backwards means the server restarted.
"""

from __future__ import annotations

from kvdoctor.pd.metrics import (
    CounterWentBackwards,
    RetractionCount,
    checked_count,
    scrape_with,
)

COUNTER = "vllm:num_preemptions_total"
FAMILY = COUNTER.removesuffix("_total")


def from_prometheus(text: str) -> int | None:
    """The preemption count in a vLLM ``/metrics`` page (summed over engines); None when the page has none."""
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    found = False
    for family in text_string_to_metric_families(text):
        if family.name != FAMILY:
            continue
        for sample in family.samples:
            if sample.name != COUNTER:
                continue
            found = True
            total += checked_count(sample.value, COUNTER, "preemptions")
    return int(total) if found else None


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
        after = scrape(self.url, timeout_s)
        if self.before is None or after is None:
            return RetractionCount(None, "none")
        if after < self.before:
            raise CounterWentBackwards(
                f"{COUNTER} went backwards during the burst ({self.before} before it, {after} after): the server "
                "restarted or the counter was reset, so this burst's preemptions cannot be counted"
            )
        return RetractionCount(after - self.before, "metrics")
