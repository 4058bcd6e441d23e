"""Token-by-token comparison of two runs of the same prompts, and the noise floor between repeats.

A run is one :class:`Generation` per request: the greedy tokens, each token's logprob, and the
margin between the top-1 and top-2 logprobs at each position (how close the greedy choice was). Two
generations are identical when their token lists are equal; otherwise the first divergence is the
first position where they differ, or where one ended (``None`` for the token that is not there).

The noise floor is the same comparison between two runs of the *reference*: a request that already
diverges between two identical deployments cannot be blamed on retraction at or after that position.
Everything else is a divergence above the noise floor, however small its margin: near-ties are
reported (the reference's margin), never excused.

A logprob that is not a finite number (a reply's ``null``, which SGLang's orjson writes for a NaN, a ``NaN``
or ``Infinity``, or none at all) is a malformed reply, never a number to compare: ``max()`` over a leading
NaN is NaN, and ``NaN > threshold`` is False, so one null would hide every later drift. Such positions are
left out of every |Δlogprob| (which stays a finite number) and named, per run, request and token, in
:attr:`RequestDiff.non_finite` and :attr:`NoiseFloor.non_finite`; :func:`drift` reports them and the logprobs
gate is red (``malformed_reply``) whenever there is one.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import InitVar, asdict, dataclass, field

REFERENCE, REPEAT, PRESSURED = "reference", "repeat", "pressured"  # the runs, as a non-finite logprob names them
RUNS = (REFERENCE, REPEAT, PRESSURED)
NON_FINITE_SHOWN = 16  # non-finite logprobs listed in the result (all are counted)


@dataclass(frozen=True)
class NonFinite:
    """A logprob that is no finite number: which run's reply, which request, which token, what it was."""

    run: str
    request: int
    position: int
    value: str  # "null/NaN" (the parser reads a null as NaN), "+Inf", "-Inf", or "missing" (no logprob there)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _spelled(x: object) -> str:
    if isinstance(x, float) and math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return "null/NaN" if x is None or isinstance(x, float) else repr(x)[:40]


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

    def malformed_logprobs(self, run: str, request: int) -> list[NonFinite]:
        """Every token whose logprob is not a finite number (or is missing), named as RUN's REQUEST."""
        out = [NonFinite(run, request, i, _spelled(x)) for i, x in enumerate(self.logprobs) if not _finite(x)]
        return out + [NonFinite(run, request, i, "missing") for i in range(len(self.logprobs), len(self.tokens))]


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
    # Each logprob of either reply that is no finite number. Not a dataclass field, so the result JSON's rows keep
    # exactly their published keys (a finite run's JSON is unchanged); :func:`drift` reports them.
    non_finite: InitVar[tuple[NonFinite, ...]] = ()
    # |Δlogprob| per position of the identical prefix (None where either is no finite number): where the logprobs
    # first drift (:func:`drift`). Not a field either, for the same reason.
    deltas: InitVar[tuple[float | None, ...]] = ()

    def __post_init__(self, non_finite: tuple[NonFinite, ...], deltas: tuple[float | None, ...]) -> None:
        object.__setattr__(self, "non_finite", tuple(non_finite))
        object.__setattr__(self, "deltas", tuple(deltas))


def diff(index: int, ref: Generation, got: Generation, runs: tuple[str, str] = (REFERENCE, PRESSURED)) -> RequestDiff:
    """REF against GOT (request INDEX); RUNS name the two replies where a logprob is no finite number."""
    common = min(len(ref.tokens), len(got.tokens))
    prefix = next((i for i in range(common) if ref.tokens[i] != got.tokens[i]), common)
    pairs = zip(ref.logprobs[:prefix], got.logprobs[:prefix], strict=False)
    deltas = tuple(abs(a - b) if _finite(a) and _finite(b) else None for a, b in pairs)
    worst = max((d for d in deltas if d is not None), default=0.0)
    bad = (*ref.malformed_logprobs(runs[0], index), *got.malformed_logprobs(runs[1], index))
    if prefix == len(ref.tokens) == len(got.tokens):
        return RequestDiff(
            index,
            len(ref.tokens),
            len(got.tokens),
            prefix,
            False,
            max_abs_dlogprob=worst,
            non_finite=bad,
            deltas=deltas,
        )
    return RequestDiff(
        index,
        len(ref.tokens),
        len(got.tokens),
        prefix,
        True,
        position=prefix,
        ref_token=ref.tokens[prefix] if prefix < len(ref.tokens) else None,
        got_token=got.tokens[prefix] if prefix < len(got.tokens) else None,
        ref_margin=_margin(ref, prefix),
        max_abs_dlogprob=worst,
        non_finite=bad,
        deltas=deltas,
    )


def _margin(g: Generation, position: int) -> float | None:
    """G's top-2 margin at POSITION; None when unknown (absent, or no finite number)."""
    margin = g.margins[position] if position < len(g.margins) else None
    return margin if _finite(margin) else None


def compare(
    ref: Sequence[Generation], got: Sequence[Generation], runs: tuple[str, str] = (REFERENCE, PRESSURED)
) -> list[RequestDiff]:
    if len(ref) != len(got):
        raise ValueError(f"runs of different sizes: {len(ref)} and {len(got)} requests")
    return [diff(i, r, g, runs) for i, (r, g) in enumerate(zip(ref, got, strict=True))]


@dataclass(frozen=True)
class NoiseFloor:
    """What differs between two runs of the reference deployment."""

    requests: int
    diverged: dict[int, int]  # request index -> first divergence position between the repeats
    max_abs_dlogprob: float  # over the finite logprobs only
    non_finite: tuple[NonFinite, ...] = field(default=())  # logprobs of either run that are no finite number

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
        out: dict[str, object] = {
            "requests": self.requests,
            "diverged_requests": self.count,
            "diverged_at": {str(k): v for k, v in sorted(self.diverged.items())},
            "max_abs_dlogprob": self.max_abs_dlogprob,
        }
        if self.non_finite:  # only then: a finite run's JSON keeps exactly its keys
            out["non_finite_logprobs"] = len(self.non_finite)
        return out


def noise_floor(ref: Sequence[Generation], repeat: Sequence[Generation]) -> NoiseFloor:
    diffs = compare(ref, repeat, (REFERENCE, REPEAT))
    diverged = {d.index: d.position for d in diffs if d.diverged and d.position is not None}
    bad = tuple(x for d in diffs for x in d.non_finite)
    return NoiseFloor(len(diffs), diverged, max((d.max_abs_dlogprob for d in diffs), default=0.0), bad)


def against(ref: Sequence[Generation], got: Sequence[Generation], noise: NoiseFloor) -> list[RequestDiff]:
    """The pressured run against the reference, each divergence marked when the noise floor excuses it."""
    out = []
    for d in compare(ref, got, (REFERENCE, PRESSURED)):
        if noise.excuses(d):
            d = RequestDiff(**{**d.__dict__, "within_noise": True})  # __dict__ carries non_finite too
        out.append(d)
    return out


DRIFT_FACTOR = 100.0  # a logprob delta this many times the noise floor's (or 1e-6) is drift
DRIFT_MIN = 1e-6


def drift(diffs: Sequence[RequestDiff], noise: NoiseFloor) -> dict[str, object]:
    """Requests whose logprobs moved on the identical prefix far beyond the reference's own repeat: the
    restored state is not bitwise the reference's (gated by ``gates.logprobs``). Measured: LFM2 over PD under
    retraction 1e-4 to 3e-3 against a floor of 5e-7; a dense Llama under 19 PD retractions 1e-6; LFM2 on one
    server (recompute) 6e-6.

    Every |Δlogprob| here is over finite logprobs only; the logprobs that are no finite number (in the reference,
    its repeat or the pressured run) are counted and the first few named under ``non_finite`` (present only
    then), which turns the logprobs gate red: a malformed reply proves nothing about the restored state."""
    threshold = DRIFT_FACTOR * max(noise.max_abs_dlogprob, DRIFT_MIN)
    drifted = [d.index for d in diffs if not d.max_abs_dlogprob <= threshold]  # an overflowed delta drifts too
    out: dict[str, object] = {
        "threshold": threshold,
        "requests": drifted,
        "max": max((d.max_abs_dlogprob for d in diffs), default=0.0),
    }
    first = _first_drift([d for d in diffs if d.index in set(drifted)], threshold)
    if first is not None:
        out["first"] = first
    bad = _ordered([*noise.non_finite, *(x for d in diffs for x in d.non_finite)])
    if bad:
        out["non_finite"] = {"count": len(bad), "first": [x.to_dict() for x in bad[:NON_FINITE_SHOWN]]}
    return out


def _first_drift(drifted: Sequence[RequestDiff], threshold: float) -> dict[str, object] | None:
    """The earliest token (then the lowest request) whose |Δlogprob| passes THRESHOLD: where the state first showed
    (``first``: request, position, its |Δlogprob|); None when no delta was kept per position."""
    found = [
        (p, d.index, delta)
        for d in drifted
        for p, delta in enumerate(d.deltas)  # type: ignore[attr-defined]
        if delta is not None and not delta <= threshold
    ]
    if not found:
        return None
    position, index, delta = min(found, key=lambda f: (f[0], f[1]))
    return {"request": index, "position": position, "dlogprob": delta}


def _ordered(found: Iterable[NonFinite]) -> list[NonFinite]:
    """FOUND once each (the reference's own appear in both comparisons), by request, token, then run."""
    rank = {name: i for i, name in enumerate(RUNS)}
    return sorted(set(found), key=lambda x: (x.request, x.position, rank.get(x.run, len(RUNS)), x.run))


def median_distinct(run: Sequence[Generation]) -> float:
    """The median number of distinct tokens per request (a degenerate model repeats 1-2 tokens)."""
    return float(statistics.median(g.distinct for g in run)) if run else 0.0


def median_length(run: Sequence[Generation]) -> float:
    return float(statistics.median(len(g.tokens) for g in run)) if run else 0.0
