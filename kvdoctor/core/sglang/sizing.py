"""Pool capacities under the flags, and how many requests fit before retraction starts.

SGLang sizes pools from free GPU memory at start-up, which kvdoctor cannot see; what it can model
exactly is the effect of the bounds a deployment sets (``--max-total-tokens``, the two ratios,
``--max-mamba-cache-size``), which is precisely what a retraction test relies on.
"""

from __future__ import annotations

import math

from kvdoctor.core.record import record
from kvdoctor.core.sglang import rules
from kvdoctor.core.sglang.flags import ServerFlags
from kvdoctor.core.sglang.spec import StateSpec


@record(frozen=True)
class Sizing:
    """Token and slot capacities of each pool (None where only run-time memory decides)."""

    page_size: int
    swa_full_tokens_ratio: float
    swa_ratio_source: str
    mamba_full_memory_ratio: float
    mamba_ratio_source: str
    full_tokens: int | None
    swa_tokens: int | None
    mamba_slots: int | None
    mamba_slots_source: str
    mamba_slots_per_request: int
    full_bytes: int | None
    swa_bytes: int | None
    mamba_bytes: int | None

    def requests_fit(self, tokens_per_request: int, window: int | None) -> int | None:
        """Requests of TOKENS_PER_REQUEST tokens that fit at once before the pools run out."""
        limits: list[int] = []
        per_request = _ceil_to(tokens_per_request, self.page_size)
        if self.full_tokens is not None and self.full_tokens > 0:
            limits.append(self.full_tokens // per_request)
        if self.swa_tokens is not None:
            # The SWA pool keeps only the window (plus a page in flight) of each request.
            held = per_request
            if window is not None:
                held = min(per_request, _ceil_to(window, self.page_size) + self.page_size)
            limits.append(self.swa_tokens // held)
        if self.mamba_slots is not None:
            limits.append(self.mamba_slots // self.mamba_slots_per_request)
        return min(limits) if limits else None


@record(frozen=True)
class RetractionForecast:
    """Will a load of CONCURRENT requests of TOKENS each overflow the pools (and so retract)?"""

    concurrent: int
    tokens_per_request: int
    peak_tokens: int
    capacity_tokens: int | None
    requests_fit: int | None

    @property
    def will_retract(self) -> bool | None:
        return None if self.requests_fit is None else self.requests_fit < self.concurrent


def _ceil_to(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _floor_to(value: int, multiple: int) -> int:
    return value // multiple * multiple


def _ratio(flag: float | None, family: str, key: str, fallback: float) -> tuple[float, str]:
    if flag is not None:
        return flag, "flag"
    override = rules.RATIO_OVERRIDES.get(family, {}).get(key)
    if override is not None:
        return override, f"{family} model override"
    return fallback, "SGLang fallback"


def mamba_strategy(spec: StateSpec, flags: ServerFlags, model_type: str = "") -> str | None:
    """The Mamba radix-cache strategy this server resolves (``rules.MAMBA_SLOTS_SOURCE``); None with its radix
    cache off (asked, a PD decode without its radix opt-in, a model that forces it off)."""
    radix_on = not flags.disable_radix_cache and (not flags.is_decode or flags.disaggregation_decode_enable_radix_cache)
    if not radix_on or model_type in rules.RADIX_OFF_MODEL_TYPES:
        return None
    strategy = flags.mamba_radix_cache_strategy
    forced = next(
        (rules.FORCED_MAMBA_STRATEGY[a] for a in spec.architectures if a in rules.FORCED_MAMBA_STRATEGY), None
    )
    if strategy == "auto" and forced is not None:
        strategy = forced
    if strategy == "auto":
        wants_buffer = not flags.disable_overlap_schedule or flags.page_size > 1
        supported = bool(set(spec.architectures) & rules.MAMBA_EXTRA_BUFFER_ARCHS)
        strategy = "extra_buffer" if wants_buffer and supported else "no_buffer"
    return strategy


def mamba_slots_per_request(spec: StateSpec, flags: ServerFlags, model_type: str = "") -> int:
    """How many mamba slots one running request holds on this server (``rules.MAMBA_SLOTS_SOURCE``).

    The radix cache is off when asked, on a decode server without its radix opt-in, and for models
    that force it off (MiniCPM-SALA); Inkling pins the extra-buffer strategy (``FORCED_MAMBA_STRATEGY``).
    """
    strategy = mamba_strategy(spec, flags, model_type)
    if strategy is None:
        return rules.MAMBA_SLOTS_RADIX_OFF
    tracking = rules.MAMBA_TRACKING_SLOTS.get(strategy, 0)
    if strategy == "extra_buffer" and flags.disable_overlap_schedule:
        tracking = rules.MAMBA_TRACKING_SLOTS_NO_OVERLAP
    return rules.MAMBA_SLOTS_RADIX_BASE + tracking


def size_pools(spec: StateSpec, flags: ServerFlags, model_type: str = "") -> Sizing:
    """Capacities implied by the flags (pool_configurator / kv_cache_configurator rules).

    Per scheduler: ``--max-mamba-cache-size`` is split over the attention data-parallel shards
    (``rules.MAMBA_CACHE_PER_SHARD_SOURCE``)."""
    family = spec.classification.family
    page = flags.page_size
    swa_ratio, swa_src = _ratio(
        flags.swa_full_tokens_ratio, family, "swa_full_tokens_ratio", rules.SWA_FULL_TOKENS_RATIO_FALLBACK
    )
    mamba_ratio, mamba_src = _ratio(
        flags.mamba_full_memory_ratio, family, "mamba_full_memory_ratio", rules.MAMBA_FULL_MEMORY_RATIO_FALLBACK
    )
    full_tokens = swa_tokens = None
    if flags.max_total_tokens is not None:
        capped = _floor_to(flags.max_total_tokens, page)
        if spec.swa is not None and spec.full is None:  # all-SWA: the ratio is not applied
            full_tokens, swa_tokens = 0, capped
        else:
            full_tokens = capped
            swa_tokens = _floor_to(int(capped * swa_ratio), page) if spec.swa is not None else None
    full_bpt, swa_bpt = spec.bytes_per_token("full"), spec.bytes_per_token("swa")
    slot_bytes = spec.bytes_per_mamba_slot
    mamba_slots, slots_src = None, "not a recurrent model"
    if spec.recurrent is not None:
        if flags.max_mamba_cache_size is not None:
            shards = flags.attention_dp_size
            mamba_slots = flags.max_mamba_cache_size // shards
            slots_src = "--max-mamba-cache-size" + (f" over {shards} attention-DP shards" if shards > 1 else "")
        elif full_tokens is not None and slot_bytes:
            # The mamba budget is r/(1+r) of what the pools share; taking the KV share as the
            # capped pool gives a lower bound (SGLang carves the mamba pool out before the cap).
            kv_bytes = full_tokens * full_bpt + (swa_tokens or 0) * swa_bpt
            mamba_slots = max(0, math.floor(kv_bytes * mamba_ratio // slot_bytes) - 1)
            slots_src = "lower bound: KV share taken as the --max-total-tokens pool"
        else:
            slots_src = "decided by free GPU memory at start-up"
    return Sizing(
        page_size=page,
        swa_full_tokens_ratio=swa_ratio,
        swa_ratio_source=swa_src,
        mamba_full_memory_ratio=mamba_ratio,
        mamba_ratio_source=mamba_src,
        full_tokens=full_tokens,
        swa_tokens=swa_tokens,
        mamba_slots=mamba_slots,
        mamba_slots_source=slots_src,
        mamba_slots_per_request=mamba_slots_per_request(spec, flags, model_type),
        full_bytes=None if full_tokens is None else full_tokens * full_bpt,
        swa_bytes=None if swa_tokens is None else swa_tokens * swa_bpt,
        mamba_bytes=None if mamba_slots is None else (mamba_slots + 1) * slot_bytes,
    )


def forecast(sizing: Sizing, spec: StateSpec, concurrent: int, tokens_per_request: int) -> RetractionForecast:
    """Peak token demand of CONCURRENT requests against the pools."""
    return RetractionForecast(
        concurrent=concurrent,
        tokens_per_request=tokens_per_request,
        peak_tokens=concurrent * tokens_per_request,
        capacity_tokens=sizing.full_tokens if sizing.full_tokens else sizing.swa_tokens,
        requests_fit=sizing.requests_fit(tokens_per_request, spec.sliding_window),
    )
