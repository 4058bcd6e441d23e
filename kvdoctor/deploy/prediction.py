"""Before launch: will this eval's peak token demand overflow the decode pool (and so retract)?

The decode role of a PD pair runs a chunk cache (no prefix sharing), so every request in flight
holds its whole prompt plus the tokens it generates. Peak demand is therefore
``min(parallel, questions) × (prompt tokens + max_new_tokens)``. Prompt tokens are estimated
from characters at ``CHARS_PER_TOKEN`` (≈ 4 for English text under BPE tokenizers of the Llama /
GPT families; GSM8K is plain English with digits), because a tokenizer is not available before
launch. The pool capacity comes from ``kvdoctor.core.sglang.analysis`` (the sizing ``inspect`` reports,
which also names the retraction backup backend) when it can load the model's config, else from
the decode server's ``--max-total-tokens``.

The verdict and its sentence come from one source: when the core sizing says how many requests
fit at once (every pool counted: full, SWA window, mamba slots), that count decides, and the
sentence says which pools there are when the full pool is not the limit (a hybrid model's SWA pool
can hold fewer requests than a peak of 0.4x the full pool suggests). Only without that count does
the full-pool ratio decide.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from kvdoctor._exceptions import KvdoctorError
from kvdoctor.deploy.plan import flag_value

CHARS_PER_TOKEN = 4.0
POOL_DIVISOR = 4  # the default bound: a quarter of the peak demand
POOL_ALIGN = 256


@dataclass(frozen=True)
class Prediction:
    prompt_tokens: int
    per_request_tokens: int
    concurrency: int
    peak_tokens: int
    capacity_tokens: int | None
    capacity_source: str
    backup_backend: str | None = None
    requests_fit: int | None = None  # from core sizing: every pool (full, SWA window, mamba slots)
    chars_per_token: float = CHARS_PER_TOKEN
    swa_tokens: int | None = None  # the other pools of the core sizing, named when they limit
    mamba_slots: int | None = None

    @property
    def retraction_expected(self) -> bool | None:
        if self.requests_fit is not None:
            return self.requests_fit < self.concurrency
        if self.capacity_tokens is None:
            return None
        return self.peak_tokens > self.capacity_tokens

    def message(self) -> str:
        peak = f"predicted peak demand {self.peak_tokens:,} tokens"
        if self.capacity_tokens is None:
            return f"{peak}; decode pool capacity unknown (no --max-total-tokens, no sizing)"
        # A pool of 0 tokens (``-- --max-total-tokens 0``) has no ratio: it once raised ZeroDivisionError (exit 4).
        ratio = f"{self.peak_tokens / self.capacity_tokens:.1f}x, " if self.capacity_tokens > 0 else ""
        backup = f"; retraction backup: {self.backup_backend}" if self.backup_backend else ""
        head = f"{peak} vs decode pool {self.capacity_tokens:,} tokens ({ratio}from {self.capacity_source})"
        return f"{head}: {self._verdict()}{backup}"

    def _verdict(self) -> str:
        unlikely = "retraction is unlikely: the guard will probably fail"
        if self.requests_fit is None:
            if (self.capacity_tokens or 0) < self.per_request_tokens:
                return self._none_fits("")
            return "retraction expected" if self.retraction_expected else f"pool large enough that {unlikely}"
        if self.requests_fit >= self.concurrency:
            return f"all {self.concurrency} requests in flight fit at once, so {unlikely}"
        fit = f"{self.requests_fit} of {self.concurrency} requests in flight fit at once"
        full_pool_fit = (self.capacity_tokens or 0) // max(1, self.per_request_tokens)
        limit = ""
        if full_pool_fit > self.requests_fit:  # the full-pool ratio alone would say otherwise
            limit = (
                f" (the full pool alone would hold {min(full_pool_fit, self.concurrency)}; "
                f"the limit is {self._other_pools()})"
            )
        if self.requests_fit == 0:
            return self._none_fits(limit)
        return f"{fit}{limit}: retraction expected"

    def _none_fits(self, limit: str) -> str:
        return (
            f"not even one request of {self.per_request_tokens:,} tokens fits{limit}: decode cannot "
            "hold a single request, so the eval cannot run as planned (raise --max-total-tokens)"
        )

    def _other_pools(self) -> str:
        pools = []
        if self.swa_tokens is not None:
            pools.append(f"the SWA pool of {self.swa_tokens:,} tokens")
        if self.mamba_slots is not None:
            pools.append(f"{self.mamba_slots:,} mamba state slots")
        return " or ".join(pools) or "another pool"

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "retraction_expected": self.retraction_expected}


def tokens_from_chars(chars: float) -> int:
    return math.ceil(chars / CHARS_PER_TOKEN)


def peak_demand(
    mean_prompt_chars: float, max_new_tokens: int, parallel: int, num_questions: int | None
) -> tuple[int, int, int, int]:
    """(prompt tokens, tokens per request, concurrency, peak tokens)."""
    prompt = tokens_from_chars(mean_prompt_chars)
    per_request = prompt + max_new_tokens
    concurrency = parallel if num_questions is None else min(parallel, num_questions)
    return prompt, per_request, concurrency, concurrency * per_request


def default_pool_tokens(per_request_tokens: int, peak_tokens: int) -> int:
    """A decode pool a quarter of the peak (so it retracts), never below two whole requests."""
    wanted = max(2 * per_request_tokens, peak_tokens // POOL_DIVISOR)
    return math.ceil(wanted / POOL_ALIGN) * POOL_ALIGN


def predict(
    model: str,
    decode_server_args: Sequence[str],
    *,
    mean_prompt_chars: float,
    max_new_tokens: int,
    parallel: int,
    num_questions: int | None,
) -> Prediction:
    prompt, per_request, concurrency, peak = peak_demand(mean_prompt_chars, max_new_tokens, parallel, num_questions)
    capacity, source, backend, fit, others = _capacity(model, decode_server_args, per_request)
    return Prediction(
        prompt,
        per_request,
        concurrency,
        peak,
        capacity,
        source,
        backend,
        fit,
        swa_tokens=others[0],
        mamba_slots=others[1],
    )


def _capacity(
    model: str, server_args: Sequence[str], per_request: int
) -> tuple[int | None, str, str | None, int | None, tuple[int | None, int | None]]:
    """(pool tokens, where from, backup backend, requests that fit, (SWA tokens, mamba slots)) from
    the core analysis when it can size the model, else the pool size from the flag."""
    from kvdoctor.core.sglang.analysis import analyze

    try:
        analysis = analyze(model, list(server_args))
    except KvdoctorError:  # a model kvdoctor cannot size (no local config): use the flag
        analysis = None
    backup = analysis.backup.backend if analysis is not None else None
    if analysis is not None and analysis.sizing.full_tokens is not None:
        sizing = analysis.sizing
        fit = sizing.requests_fit(per_request, analysis.spec.sliding_window)
        others = (getattr(sizing, "swa_tokens", None), getattr(sizing, "mamba_slots", None))
        return sizing.full_tokens, "kvdoctor inspect sizing", backup, fit, others
    flag = flag_value(server_args, "--max-total-tokens")
    if flag is not None and flag.isdigit():
        return int(flag), "--max-total-tokens", backup, None, (None, None)
    return None, "unknown", backup, None, (None, None)
