"""The verdict of a consistency run: every gate is a named condition with its value and reason.

Red when the pressured run's tokens diverge from the reference above the noise floor, and red
("guard has no teeth") whenever the comparison could not have caught a lost state: the pressured run
retracted nothing, the reference retracted something (it is no unpressured reference), the
retraction count is unknown, the reference output is degenerate (a model that barely depends on its
input cannot show lost state), the reference does not even agree with itself, or a stand-in function
ran (the tokens were not all SGLang's own work).

Every number a gate reads is checked to be one before it is compared: a NaN compares False with everything,
so ``nan > threshold``, ``nan == 0`` and ``nan > 0`` would each read as a pass. A logprob that is no finite
number is a malformed reply (``malformed_reply``); a count that is none is an unknown count (``no_teeth``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvdoctor.consistency.compare import NoiseFloor, RequestDiff
from kvdoctor.core.consistency_facts import consistency_facts
from kvdoctor.core.paths import ActsOn
from kvdoctor.core.servers import facts

# A degenerate reference: fewer distinct tokens per request than this share of its length (median).
# Measured: --load-format dummy gave 2 of 32 (a two-token cycle); a std-0.02 random checkpoint 59 of 64.
MIN_DISTINCT_SHARE = 0.25
# More reference requests than this share diverging between two identical deployments: too noisy.
MAX_NOISY_SHARE = 0.25


@dataclass(frozen=True)
class Gate:
    name: str
    passed: bool
    reason: str  # "passed" or why not (diverged, logprob_drift, malformed_reply, no_teeth, degenerate, ...)
    message: str


def tokens(diffs: Sequence[RequestDiff], noise: NoiseFloor) -> Gate:
    red = [d for d in diffs if d.diverged and not d.within_noise]
    same = sum(not d.diverged for d in diffs)
    excused = sum(d.within_noise for d in diffs)
    tail = f" ({excused} more within the noise floor)" if excused else ""
    if not red:
        return Gate("tokens", True, "passed", f"{same}/{len(diffs)} requests identical to the reference{tail}")
    first = min(red, key=lambda d: (d.position or 0, d.index))
    margin = f", reference top-2 margin {first.ref_margin:.3g}" if first.ref_margin is not None else ""
    return Gate(
        "tokens",
        False,
        "diverged",
        f"{len(red)}/{len(diffs)} requests diverge from the reference above the noise floor{tail}; first: "
        f"request {first.index} at token {first.position} ({_tok(first.ref_token)} → {_tok(first.got_token)}{margin})",
    )


def logprobs(drift: dict[str, object], total: int, noise_max: float) -> Gate:
    """Bitwise-equal logprobs, as vLLM's preemption test requires: a restored state that moves the logprobs
    of identical tokens far beyond the reference's own repeat is not the reference's state (measured: a
    ShortConv state dropped from LFM2's backup moves them by 1.5e-3 and flips no token, its conv window being
    two tokens).

    Unknown, so red (``malformed_reply``), when a reply carried a logprob that is no finite number (DRIFT's
    ``non_finite``: a null, NaN or infinity, or none at all), or when the deltas themselves are none."""
    bad = drift.get("non_finite")
    if isinstance(bad, dict) and bad.get("count"):
        first = bad["first"][0]
        more = f" and {bad['count'] - 1} more" if bad["count"] > 1 else ""
        seen = len(drift["requests"])  # type: ignore[arg-type]
        also = f" (the finite ones drift in {seen}/{total} requests too)" if seen else ""
        return Gate(
            "logprobs",
            False,
            "malformed_reply",
            f"logprobs unknown: {bad['count']} logprob(s) in the replies are no finite number: the "
            f"{first['run']} run's request {first['request']} at token {first['position']} ({first['value']})"
            f"{more}; a malformed reply cannot show that the restored state is the reference's{also}",
        )
    numbers = {"max |Δlogprob|": drift["max"], "threshold": drift["threshold"], "noise floor": noise_max}
    broken = [f"{name} {value}" for name, value in numbers.items() if not _finite(value)]
    if broken:
        return Gate(
            "logprobs",
            False,
            "malformed_reply",
            f"logprobs unknown: no finite number ({', '.join(broken)}), so no delta can be compared",
        )
    drifted = list(drift["requests"])  # type: ignore[call-overload]
    if not drifted:
        return Gate("logprobs", True, "passed", f"max |Δlogprob| {drift['max']:.2g} within {drift['threshold']:.2g}")
    first = drift.get("first")
    at = f"; first: request {first['request']} at token {first['position']}" if isinstance(first, dict) else ""
    return Gate(
        "logprobs",
        False,
        "logprob_drift",
        f"logprobs drift in {len(drifted)}/{total} requests before any token diverges: max |Δlogprob| "
        f"{drift['max']:.2g} against the noise floor's {noise_max:.2g} (threshold {drift['threshold']:.2g}){at}: "
        "the state is not bitwise the reference's",
    )


def pressure_words(server: str) -> dict[str, str]:
    """How the pressure gate names what SERVER's pressured run did (SGLang retracts; vLLM preempts and recomputes):
    the keywords of :func:`pressure`, from the server's facts and its room's consistency facts."""
    words = consistency_facts(server)
    return {"noun": facts(server).noun, "verb": words.pressed, "consequence": words.pressure_consequence}


# Each server's words by name, for callers that still pick them by name (consistency/run.py) until they ask
# pressure_words(server); SGLang's are pressure()'s defaults.
SGLANG_PRESSURE = pressure_words("sglang")
VLLM_PRESSURE = pressure_words("vllm")


def pressure(
    pressured: int | None,
    reference: int | None,
    source: str,
    *,
    noun: str = SGLANG_PRESSURE["noun"],
    verb: str = SGLANG_PRESSURE["verb"],
    consequence: str = SGLANG_PRESSURE["consequence"],
) -> Gate:
    not_counts = _not_counts(pressured=pressured, reference=reference)
    if pressured is None or reference is None or not_counts:
        return Gate(
            "pressure",
            False,
            "no_teeth",
            f"guard has no teeth: the {noun} count is unknown (source: {source}{not_counts}); nothing proves a "
            f"{noun} ran",
        )
    if pressured == 0:
        return Gate(
            "pressure",
            False,
            "no_teeth",
            f"guard has no teeth: the pressured run {verb} nothing, so {consequence}",
        )
    if reference > 0:
        return Gate(
            "pressure",
            False,
            "no_teeth",
            f"guard has no teeth: the reference {verb} {reference} request(s); it is no unpressured reference",
        )
    return Gate("pressure", True, "passed", f"pressured run {verb} {pressured}, the reference 0 ({source})")


def fault_fired(name: str, installed: bool, fired: int, failed: str | None, words: ActsOn) -> Gate:
    """An injected fault must have run on what it acts on (a resumed request, a prefix-cache hit, a transfer, ...;
    WORDS say it: ``kvdoctor.core.paths.acts_on``), else the run tested nothing. Every fault-fired gate is made
    through ``kvdoctor.consistency.fault_gate.fault_fired_from``, which counts FIRED from the servers' log."""
    if failed:
        return Gate("fault-fired", False, "fault_failed", f"--inject {name} failed inside the server: {failed}")
    if not installed:
        return Gate(
            "fault-fired", False, "no_teeth", f"guard has no teeth: --inject {name} was never installed in the server"
        )
    if not (_count(fired) and fired > 0):  # a NaN count is no firing
        return Gate(
            "fault-fired",
            False,
            "no_teeth",
            f"guard has no teeth: --inject {name} never fired ({words.absent}{_not_counts(fired=fired)})",
        )
    return Gate("fault-fired", True, "passed", f"--inject {name} {words.on.format(n=fired)}")


def prefix_hits(
    subject: int | None, reference: int | None, source: str, hit_phase: Mapping[str, int | None] | None = None
) -> Gate:
    """``--scenario prefix-cache``: the subject's prefix cache must have served tokens (vLLM's
    ``vllm:prefix_cache_hits_total``) and the reference's none, else the comparison tested no cached state; and,
    where the subject's replies said each request's cached tokens (HIT_PHASE: the hit phase's ``requests`` and
    ``hit_requests``, None when unknown), every hit-phase request must have hit."""
    hit, sent = (hit_phase or {}).get("hit_requests"), (hit_phase or {}).get("requests")
    not_counts = _not_counts(subject=subject, reference=reference, hit_requests=hit, requests=sent)
    if subject is None or reference is None or not_counts:
        return Gate(
            "prefix-cache",
            False,
            "no_teeth",
            f"guard has no teeth: the prefix-cache hit count is unknown (source: {source}{not_counts}); nothing "
            "proves a request read cached blocks",
        )
    if subject == 0:
        return Gate(
            "prefix-cache",
            False,
            "no_teeth",
            "guard has no teeth: the subject's prefix cache served 0 tokens, so no request read cached blocks",
        )
    if reference > 0:
        return Gate(
            "prefix-cache",
            False,
            "no_teeth",
            f"guard has no teeth: the reference hit its prefix cache for {reference} tokens; it does not compute "
            "every token",
        )
    if hit is not None and sent is not None and hit < sent:
        return Gate(
            "prefix-cache",
            False,
            "no_teeth",
            f"guard has no teeth: {sent - hit} of the {sent} hit-phase requests read no cached tokens (usage."
            f"prompt_tokens_details; {hit} hit), so their prefix was evicted or never cached before they came "
            f"(the subject's prefix cache served {subject} tokens in all)",
        )
    every = f"; {hit}/{sent} hit-phase requests hit" if hit is not None else ""
    return Gate(
        "prefix-cache",
        True,
        "passed",
        f"subject's prefix cache served {subject} tokens, the reference 0 ({source}){every}",
    )


def offload(subject: int | None, reference: int | None, source: str, stored: int | None = None) -> Gate:
    """``--scenario offload``: the pressured server's OffloadingConnector must have loaded blocks from its CPU tier
    (``vllm:kv_offload_load_bytes`` grew), else every resumed request was recomputed (or found its blocks still
    in the GPU prefix cache) and no loaded state was compared; the reference, which runs no connector, must have
    loaded nothing (its page has no such counter: None is its 0). Beside the pressure gate, which proves the
    preemptions."""
    not_counts = _not_counts(subject=subject, reference=reference, stored=stored)
    if subject is None or not_counts:
        why = not_counts.removeprefix("; ") or "no vllm:kv_offload_load_bytes on the pressured server's /metrics"
        return Gate(
            "offload",
            False,
            "no_teeth",
            f"guard has no teeth: the bytes loaded from the CPU tier are unknown (source: {source}; {why}); "
            "nothing proves a block was loaded",
        )
    if subject == 0:
        wrote = f" (it stored {stored:,} bytes)" if stored else ""
        return Gate(
            "offload",
            False,
            "no_teeth",
            f"guard has no teeth: the pressured server loaded 0 bytes from its CPU tier{wrote}, so every resumed "
            "request was recomputed (or hit the GPU prefix cache) and no loaded block was compared",
        )
    if reference:
        return Gate(
            "offload",
            False,
            "no_teeth",
            f"guard has no teeth: the reference loaded {reference:,} bytes from a CPU tier; it is no reference "
            "without offloading",
        )
    wrote = f", stored {stored:,}" if stored is not None else ""
    return Gate(
        "offload",
        True,
        "passed",
        f"pressured server loaded {subject:,} bytes from its CPU tier{wrote}, the reference none ({source})",
    )


def transfer(doc: Mapping[str, Any], retracted: tuple[int | None, int | None], source: str) -> Gate:
    """``--scenario transfer``: kvdoctor's observer inside the servers (DOC: ``TransferResult.transfer``) must have
    seen every one of the pressured burst's requests sent by the prefill (with its recurrent state, when the model
    has one) and committed by the pressured decode, else the comparison did not test the transfer; and RETRACTED
    (pressured, reference; SOURCE: where they were counted) must both be 0: a retraction backs the state up and
    restores it, so a divergence could be the retraction's (LFM2 over PD is red under retraction by itself: the
    overlap finding)."""
    requests, sent, committed = doc.get("requests"), doc.get("sent"), doc.get("committed")
    needs_state, state_sent = bool(doc.get("recurrent")), doc.get("state_sent")
    counts = {"sent": sent, "committed": committed, **({"state_sent": state_sent} if needs_state else {})}
    press, ref = retracted
    not_counts = _not_counts(**counts, pressured_retractions=press, reference_retractions=ref)
    if requests is None or any(v is None for v in counts.values()) or not_counts:
        return Gate(
            "transfer",
            False,
            "no_teeth",
            f"guard has no teeth: the transfer counts are unknown (source: {doc.get('source', 'none')}{not_counts}); "
            "nothing proves a request crossed the PD transfer",
        )
    seen = f"{sent}/{requests} sent by the prefill"
    seen += f" ({state_sent} with their recurrent state)" if needs_state else ""
    seen += f", {committed}/{requests} committed by the pressured decode"
    if min(counts.values()) < requests:  # type: ignore[type-var]
        return Gate(
            "transfer",
            False,
            "no_teeth",
            f"guard has no teeth: kvdoctor's observer saw {seen}, so the transfer path did not run for every request",
        )
    if press is None or ref is None:
        return Gate(
            "transfer",
            False,
            "no_teeth",
            f"guard has no teeth: the retraction count is unknown (source: {source}); a retraction would "
            "confound the transfer",
        )
    if press or ref:
        return Gate(
            "transfer",
            False,
            "no_teeth",
            f"guard has no teeth: the pressured decode retracted {press} and the reference {ref} request(s); a "
            "retraction backs the state up and restores it, so it would confound the transfer (both decodes must "
            "be roomy)",
        )
    return Gate("transfer", True, "passed", f"every request crossed the PD transfer: {seen}; nothing retracted")


def sensitivity(median_distinct: float, median_length: float) -> Gate:
    if not median_length > 0:  # NaN too
        return Gate("sensitivity", False, "degenerate", "guard has no teeth: the reference generated no tokens")
    share = median_distinct / median_length
    text = f"reference median {median_distinct:g} distinct tokens in {median_length:g}"
    if not share >= MIN_DISTINCT_SHARE:  # a NaN share is no sensitivity
        return Gate(
            "sensitivity",
            False,
            "degenerate",
            f"guard has no teeth: {text} (degenerate output barely depends on its input and cannot show lost state)",
        )
    return Gate("sensitivity", True, "passed", text)


def noise(floor: NoiseFloor) -> Gate:
    if floor.requests and floor.count / floor.requests > MAX_NOISY_SHARE:
        return Gate(
            "noise-floor",
            False,
            "noisy_reference",
            f"{floor.sentence()}: more than {MAX_NOISY_SHARE:.0%} of the reference disagrees with itself, so "
            "a divergence cannot be attributed (compare at the same concurrency, in float32)",
        )
    return Gate("noise-floor", True, "passed", floor.sentence())


def stand_in(calls: Sequence[str], used: bool) -> Gate:
    if calls:
        return Gate(
            "stand-in-unused",
            False,
            "stand_in_called",
            f"the sgl_kernel stand-in was called ({', '.join(sorted(set(calls)))}): the run is not SGLang's own work",
        )
    text = "no sgl_kernel stand-in function was called" if used else "no stand-in in use"
    return Gate("stand-in-unused", True, "passed", text)


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _not_counts(**values: object) -> str:
    """What the gate's message adds for each of VALUES that is given but no finite number >= 0 (empty when none is):
    a NaN count compares False with 0, so it would pass every gate that asks "none?". None is unknown, which
    each gate already says."""
    bad = [f"{name} is {value!r}" for name, value in values.items() if value is not None and not _count(value)]
    return f"; {', '.join(bad)}, not a count" if bad else ""


def _count(value: object) -> bool:
    return _finite(value) and value >= 0  # type: ignore[operator]


def _tok(token: int | None) -> str:
    return "end" if token is None else str(token)
