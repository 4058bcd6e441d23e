"""How many requests the decode server retracted: Prometheus first, its log as the fallback.

Names are those of SGLang 0.5.23: the counter ``sglang:num_retracted_requests_total``
(``srt/observability/metrics_collector.py``, served at ``/metrics`` with ``--enable-metrics``) and
the scheduler warning ``KV cache pool is full. Retract requests. #retracted_reqs: N, …`` — or
``Testing retraction. #retracted_reqs: N`` under ``SGLANG_TEST_RETRACT`` (``srt/managers/
scheduler.py``).

A counter is a finite count that only grows. A sample of ``+Inf``, ``NaN`` or below zero is a
malformed metric, and a count lower after the eval than before it means the server restarted or the
counter was reset: either way the eval's retractions cannot be counted, which is the deployment's
fault (``MalformedMetric`` / ``CounterWentBackwards``, exit 3, naming the metric and its values),
never "no retraction: the pool was too large" (NaN compared as 0 once) nor a kvdoctor bug (``int(inf)``
raised ``OverflowError``, exit 3 ``internal_error``).

Every TP rank runs the same scheduler and retracts the same requests, and each reports them
(metric label ``tp_rank``, log prefix ``TPn``). Counting them all would multiply the count by
the TP size, so per data-parallel group the largest per-rank count is taken, then summed over
DP groups.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kvdoctor._exceptions import DeploymentError

COUNTER = "sglang:num_retracted_requests_total"
# Labels that tell replicas of one decision apart (not separate decisions).
REPLICA_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank", "pid", "attn_cp_rank"})
_LOG_LINE = re.compile(
    r"^(?:\[(?P<prefix>[^\]]*)\])?.*?"
    r"(?:KV cache pool is full\. Retract requests\.|Testing retraction\.)\s*"
    r"#retracted_reqs: (?P<n>\d+)",
    re.MULTILINE,
)
_DP = re.compile(r"\bDP(\d+)\b")
_REPLICA = re.compile(r"\b(?:TP|PP|EP|ATTN_CP|MOE_DP)\d+\b")


@dataclass(frozen=True)
class RetractionCount:
    """A retraction count and where it came from (``metrics``, ``log`` or ``none`` = unknown)."""

    value: int | None
    source: str


FAMILY = COUNTER.removesuffix("_total")  # the name prometheus_client's parser gives the family


class MalformedMetric(DeploymentError):
    """The decode server's retraction counter is not a finite count >= 0 (``+Inf``, ``NaN``, negative)."""

    reason = "malformed_metric"


class CounterWentBackwards(DeploymentError):
    """The retraction counter is lower after the eval than before it: a restart or a reset."""

    reason = "retraction_counter_reset"


def exposition(value: float) -> str:
    """VALUE as the Prometheus text format spells it (``+Inf``, ``-Inf``, ``NaN``, ``3.0``)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def _sample_name(labels: Mapping[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{COUNTER}{{{inner}}}" if inner else COUNTER


def from_prometheus(text: str) -> int | None:
    """The retraction counter in a ``/metrics`` page; None when the page cannot say.

    SGLang creates the counter's sample only at the first retraction (``.labels(...).inc(n)``),
    so a fresh server's page carries only its HELP/TYPE lines. A page that declares the family,
    or carries other ``sglang:`` metrics, therefore means 0 retractions, not "unknown". A sample that
    is no count (``+Inf``, ``NaN``, negative) raises ``MalformedMetric`` naming it.
    """
    from prometheus_client.parser import text_string_to_metric_families

    groups: dict[tuple[tuple[str, str], ...], float] = defaultdict(float)
    found = sglang_page = False
    for family in text_string_to_metric_families(text):
        sglang_page = sglang_page or family.name.startswith("sglang:")
        found = found or family.name == FAMILY
        for sample in family.samples:
            if sample.name != COUNTER:
                continue
            found = True
            value = checked_count(sample.value, _sample_name(sample.labels), "retractions")
            key = _group_key(sample.labels)
            groups[key] = max(groups[key], value)
    if not found and not sglang_page:
        return None
    # Finite samples can still add up to +Inf (two DP groups at 1e308), which ``int()`` refuses with OverflowError.
    return int(checked_count(sum(groups.values()), COUNTER, "retractions"))


def checked_count(value: float, name: str, what: str) -> float:
    """VALUE as a counter sample NAME carries: a finite number >= 0, else ``MalformedMetric`` (its WHAT cannot be
    counted). Both servers' probes read their counters through it."""
    if not math.isfinite(value) or value < 0:
        raise MalformedMetric(
            f"{name} is {exposition(value)}, not a count (a counter is a finite number >= 0); the server's metrics "
            f"are malformed, so its {what} cannot be counted"
        )
    return value


def _group_key(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k not in REPLICA_LABELS))


def from_log(text: str) -> int:
    """Retracted requests announced in a decode server log (replicas of one decision once)."""
    per_rank: dict[str, int] = defaultdict(int)
    for match in _LOG_LINE.finditer(text):
        prefix = match.group("prefix")
        per_rank[_rank_key(prefix) if prefix else ""] += int(match.group("n"))
    per_dp: dict[str, int] = defaultdict(int)
    for rank, count in per_rank.items():
        dp = rank.split("|", 1)[0]
        per_dp[dp] = max(per_dp[dp], count)
    return sum(per_dp.values())


def _rank_key(prefix: str) -> str:
    dp = _DP.search(prefix)
    replicas = " ".join(_REPLICA.findall(prefix))
    return f"{dp.group(1) if dp else ''}|{replicas}"


class LogCursor:
    """Reads only what a log gained since ``mark()`` — the before/after of a log-based count."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def mark(self) -> None:
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def since_mark(self) -> str:
        if not self.path.exists():
            return ""
        with self.path.open("rb") as fh:
            fh.seek(self.offset)
            return fh.read().decode("utf-8", errors="replace")


def scrape(base_url: str, timeout_s: float = 10.0) -> int | None:
    """The counter from ``GET {base_url}/metrics``; None when unreachable, off, or absent."""
    return scrape_with(base_url, from_prometheus, f"decode {base_url}/metrics", timeout_s)


def scrape_with(base_url: str, parse: Callable[[str], int | None], where: str, timeout_s: float = 10.0) -> int | None:
    """``GET {base_url}/metrics`` read by PARSE (one server's counter); None when unreachable, off, or absent; a
    malformed counter raises :class:`MalformedMetric` naming WHERE."""
    import httpx

    from kvdoctor.deploy import http

    try:
        response = http.get(f"{base_url}/metrics", timeout_s=timeout_s)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    try:
        return parse(response.text)
    except MalformedMetric as exc:
        raise MalformedMetric(f"{where}: {exc}") from None
    except ValueError:
        return None


class RetractionProbe:
    """Before/after the eval: the metrics counter's delta, else what the log gained meanwhile."""

    def __init__(self, decode_url: str | None, log_path: Path | None) -> None:
        self.decode_url = decode_url
        self.cursor = LogCursor(log_path) if log_path is not None else None
        self.before: int | None = None

    def start(self, timeout_s: float = 10.0) -> None:
        self.before = scrape(self.decode_url, timeout_s) if self.decode_url else None
        if self.cursor is not None:
            self.cursor.mark()

    def finish(self, timeout_s: float = 10.0) -> RetractionCount:
        after = scrape(self.decode_url, timeout_s) if self.decode_url else None
        if self.before is not None and after is not None:
            if after < self.before:
                raise CounterWentBackwards(
                    f"decode's {COUNTER} went backwards during the eval ({self.before} before it, {after} after): "
                    "the decode server restarted or the counter was reset, so this eval's retractions cannot be "
                    "counted (not a pool-size diagnosis)"
                )
            return RetractionCount(after - self.before, "metrics")
        if self.cursor is not None:
            return RetractionCount(from_log(self.cursor.since_mark()), "log")
        return RetractionCount(None, "none")
