"""Token-by-token comparison of two runs of the same prompts, and the noise floor between repeats.

A run is one :class:`Generation` per request: the greedy tokens, each token's logprob, and the
margin between the top-1 and top-2 logprobs at each position (how close the greedy choice was). Two
generations are identical when their token lists are equal; otherwise the first divergence is the
first position where they differ, or where one ended (``None`` for the token that is not there).

The noise floor is the same comparison between two runs of the *reference*: a request that already
diverges between two identical deployments cannot be blamed on retraction at or after that position.
Everything else is a divergence above the noise floor, however small its margin: near-ties are
reported (the reference's margin), never excused.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Generation:
    tokens: tuple[int, ...]
    logprobs: tuple[float, ...] = ()
    margins: tuple[float | None, ...] = ()  # top-1 minus top-2 logprob per position
    finish: str = ""
    cached_tokens: int | None = None  # prompt tokens the server's prefix cache served (vLLM usage), when it says

    @property
    def distinct(self) -> int:
        return len(set(self.tokens))


@dataclass(frozen=True)
class RequestDiff:
    index: int
    ref_tokens: int
    got_tokens: int
    identical_prefix: int
    diverged: bool
    position: int | None = None
    ref_token: int | None = None  # None: the reference had ended there
    got_token: int | None = None
    ref_margin: float | None = None  # the reference's top-2 margin at the divergence
    max_abs_dlogprob: float = 0.0  # over the identical prefix
    within_noise: bool = False  # the reference's own repeat diverged at or before this position


def diff(index: int, ref: Generation, got: Generation) -> RequestDiff:
    common = min(len(ref.tokens), len(got.tokens))
    prefix = next((i for i in range(common) if ref.tokens[i] != got.tokens[i]), common)
    deltas = [abs(a - b) for a, b in zip(ref.logprobs[:prefix], got.logprobs[:prefix], strict=False) if a is not None]
    worst = max(deltas, default=0.0)
    if prefix == len(ref.tokens) == len(got.tokens):
        return RequestDiff(index, len(ref.tokens), len(got.tokens), prefix, False, max_abs_dlogprob=worst)
    return RequestDiff(
        index,
        len(ref.tokens),
        len(got.tokens),
        prefix,
        True,
        position=prefix,
        ref_token=ref.tokens[prefix] if prefix < len(ref.tokens) else None,
        got_token=got.tokens[prefix] if prefix < len(got.tokens) else None,
        ref_margin=ref.margins[prefix] if prefix < len(ref.margins) else None,
        max_abs_dlogprob=worst,
    )


def compare(ref: Sequence[Generation], got: Sequence[Generation]) -> list[RequestDiff]:
    if len(ref) != len(got):
        raise ValueError(f"runs of different sizes: {len(ref)} and {len(got)} requests")
    return [diff(i, r, g) for i, (r, g) in enumerate(zip(ref, got, strict=True))]


@dataclass(frozen=True)
class NoiseFloor:
    """What differs between two runs of the reference deployment."""

    requests: int
    diverged: dict[int, int]  # request index -> first divergence position between the repeats
    max_abs_dlogprob: float

    @property
    def count(self) -> int:
        return len(self.diverged)

    def excuses(self, d: RequestDiff) -> bool:
        """A divergence at or after the position where the reference already disagreed with itself."""
        at = self.diverged.get(d.index)
        return d.diverged and at is not None and d.position is not None and d.position >= at

    def sentence(self) -> str:
        if not self.diverged:
            return (
                f"noise floor: the reference repeated is identical in {self.requests}/{self.requests} requests "
                f"(max |Δlogprob| {self.max_abs_dlogprob:.2g})"
            )
        return (
            f"noise floor: the reference repeated diverges in {self.count}/{self.requests} requests "
            f"(max |Δlogprob| {self.max_abs_dlogprob:.2g}); those requests are excused at or after that position"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "requests": self.requests,
            "diverged_requests": self.count,
            "diverged_at": {str(k): v for k, v in sorted(self.diverged.items())},
            "max_abs_dlogprob": self.max_abs_dlogprob,
        }


def noise_floor(ref: Sequence[Generation], repeat: Sequence[Generation]) -> NoiseFloor:
    diffs = compare(ref, repeat)
    diverged = {d.index: d.position for d in diffs if d.diverged and d.position is not None}
    return NoiseFloor(len(diffs), diverged, max((d.max_abs_dlogprob for d in diffs), default=0.0))


def against(ref: Sequence[Generation], got: Sequence[Generation], noise: NoiseFloor) -> list[RequestDiff]:
    """The pressured run against the reference, each divergence marked when the noise floor excuses it."""
    out = []
    for d in compare(ref, got):
        if noise.excuses(d):
            d = RequestDiff(**{**d.__dict__, "within_noise": True})
        out.append(d)
    return out


DRIFT_FACTOR = 100.0  # a logprob delta this many times the noise floor's (or 1e-6) is drift
DRIFT_MIN = 1e-6


def drift(diffs: Sequence[RequestDiff], noise: NoiseFloor) -> dict[str, object]:
    """Requests whose logprobs moved on the identical prefix far beyond the reference's own repeat: the
    restored state is not bitwise the reference's (gated by ``gates.logprobs``). Measured: LFM2 over PD under
    retraction 1e-4 to 3e-3 against a floor of 5e-7; a dense Llama under 19 PD retractions 1e-6; LFM2 on one
    server (recompute) 6e-6."""
    threshold = DRIFT_FACTOR * max(noise.max_abs_dlogprob, DRIFT_MIN)
    drifted = [d.index for d in diffs if d.max_abs_dlogprob > threshold]
    return {
        "threshold": threshold,
        "requests": drifted,
        "max": max((d.max_abs_dlogprob for d in diffs), default=0.0),
    }


def median_distinct(run: Sequence[Generation]) -> float:
    """The median number of distinct tokens per request (a degenerate model repeats 1-2 tokens)."""
    return float(statistics.median(g.distinct for g in run)) if run else 0.0


def median_length(run: Sequence[Generation]) -> float:
    return float(statistics.median(len(g.tokens) for g in run)) if run else 0.0
