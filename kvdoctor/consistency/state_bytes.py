"""Which state a backup holds, read from the tensors, not from the scheduler's bookkeeping.

The digests of :mod:`kvdoctor.consistency.attribution` prove that bytes moved intact; they cannot see a faithful copy
taken at the wrong moment, and the positions they report come from the scheduler's own sequence lengths. With
``KVDOCTOR_STATE_BYTES`` both PD decodes keep the recurrent state's bytes (:mod:`kvdoctor.engines.sglang.digests`):
before every forward, the state of each request of the batch after ``pos`` positions (``state`` events), the copy
each backup took and the state before each resumed forward, with the token that forward is seeded with. The
reference decode never retracts and decodes the same tokens, so its ``state`` events are the request's state after
every position. This module says, per retraction:

- which reference position the backed-up state equals (the nearest, by the largest |Δ| of any element), beside the
  positions the KV backup holds;
- which position the resumed forward fed, with which token, and which reference position the state it fed equals:
  a state that had already absorbed the position it is fed is a double feed, observed.

"Equals" is within the noise floor this run measures: the largest |Δ| between the pressured and the reference state
at the same position, over every request's positions before its first retraction and its first diverging token
(both decodes ran the same tokens there). Generic across recurrent components (conv, temporal, side states): the
largest |Δ| of any of them decides, and each is named. Pure numpy (no torch, no SGLang); the run calls it after the
comparison.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from kvdoctor.consistency.attribution import STATE_BYTES, read_events, retraction_cycles
from kvdoctor.consistency.compare import RequestDiff
from kvdoctor.engines.sglang.digests import bytes_path, prompt_key

SHOWN = 12
CLEAR = 10.0  # a state beyond the floor still names its position when it is this many times nearer than any other
_Key = tuple[str, int]  # (prompt key, positions absorbed)


@dataclass(frozen=True)
class Match:
    """A state held against the reference's: the nearest reference position and its largest |Δ|; and the |Δ| at
    the positions the trace names (the KV backup's, the fed one)."""

    pos: int | None
    delta: float | None
    equal: bool  # within the floor
    clear: bool = False  # equal, or at least CLEAR times nearer than any other position (a state already moved)
    runner_up: float | None = None  # the |Δ| of the next nearest position
    at: dict[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Cycle:
    retraction: int
    kv_tokens: int | None
    components: list[str]
    backup: Match | None
    fed: int | None
    seed: int | None
    output: int | None  # which output token the seed is (0-based)
    resumed: Match | None
    double_feed: bool | None  # the resumed state had absorbed the position it was fed (None: not known)
    sentence: str
    slot_reused: bool | None = None  # another request ran on the backup's recurrent slot before the restore
    held_changed: bool | None = None  # the copy's recurrent digests at restore differ from those at backup


@dataclass(frozen=True)
class RequestBytes:
    index: int
    diverged: bool
    cycles: list[Cycle]


@dataclass
class StateBytes:
    kept: bool
    reason: str = ""
    floor: float | None = None
    floor_positions: int = 0
    requests: list[RequestBytes] = field(default_factory=list)
    summary: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Store:
    """One decode's kept states: the log's events and the binary file beside it."""

    def __init__(self, log: Path, burst: str | None) -> None:
        self.events, _ = read_events(log, burst) if log.exists() else ([], 0)
        data = Path(bytes_path(str(log)))  # where the server's writer put them
        self.raw = data.read_bytes() if data.exists() else b""
        self.states: dict[_Key, dict[str, Any]] = {}
        for e in self.events:
            if e.get("event") == "state" and isinstance(e.get("bytes"), dict) and "offset" in e["bytes"]:
                self.states.setdefault((str(e.get("prompt")), int(e["pos"])), e["bytes"])

    def read(self, ref: dict[str, Any] | None) -> dict[str, Any] | None:
        """Per component, its float32 values (None: not kept, or past the file's end)."""
        import numpy as np

        if not ref or "offset" not in ref:
            return None
        out: dict[str, Any] = {}
        offset = int(ref["offset"])
        for name, count in ref["parts"]:
            end = offset + 4 * int(count)
            if end > len(self.raw):
                return None
            out[name] = np.frombuffer(self.raw, dtype=np.float32, count=int(count), offset=offset)
            offset = end
        return out


def _delta(a: dict[str, Any], b: dict[str, Any] | None) -> float | None:
    """The largest |Δ| of any element of any component (None: not comparable)."""
    import numpy as np

    if b is None or sorted(a) != sorted(b) or any(a[k].shape != b[k].shape for k in a):
        return None
    worst = 0.0
    for k in a:
        diff = np.abs(a[k].astype(np.float64) - b[k].astype(np.float64))
        if not np.all(np.isfinite(diff)):
            return float("inf")
        worst = max(worst, float(diff.max(initial=0.0)))
    return worst


def _match(state: dict[str, Any] | None, prompt: str, ref: _Store, tol: float, named: dict[str, int | None]) -> Match:
    """STATE against every reference position of PROMPT; NAMED: the positions whose |Δ| the report shows."""
    if state is None:
        return Match(None, None, False)
    deltas = {pos: _delta(state, ref.read(b)) for (p, pos), b in ref.states.items() if p == prompt}
    found = {pos: d for pos, d in deltas.items() if d is not None}
    at = {label: (found.get(pos) if pos is not None else None) for label, pos in named.items()}
    if not found:
        return Match(None, None, False, at=at)
    ranked = sorted(found, key=lambda p: (found[p], p))
    pos, delta = ranked[0], found[ranked[0]]
    runner_up = found[ranked[1]] if len(ranked) > 1 else None
    equal = delta <= tol
    clear = equal or (runner_up is not None and delta * CLEAR <= runner_up)
    return Match(pos, delta, equal, clear, runner_up, at)


def _fmt(d: float | None) -> str:
    return "n/a" if d is None else ("0" if d == 0 else f"{d:.2g}")


def _relation(m: Match) -> str:
    return "=" if m.equal else ("nearest to" if m.clear else "≈ (nothing near)")


def _how(m: Match) -> str:
    if m.equal:
        return f"max |Δ| {_fmt(m.delta)}"
    return f"max |Δ| {_fmt(m.delta)}, beyond the floor; the next nearest {_fmt(m.runner_up)}"


def _sentence(c: Cycle) -> str:
    parts = []
    b = c.backup
    if b is None or b.pos is None:
        parts.append(f"backup {c.retraction}: its state was not kept")
    else:
        text = f"backup {c.retraction}: {', '.join(c.components)} {_relation(b)} reference after {b.pos} positions "
        text += f"({_how(b)}), the KV backup holds {c.kv_tokens}"
        if c.kv_tokens is not None and c.kv_tokens != b.pos:
            text += f" (reference after {c.kv_tokens}: max |Δ| {_fmt(b.at.get('kv'))})"
        parts.append(text)
    r = c.resumed
    if c.fed is not None:
        token = f"output #{c.output}, token {c.seed}" if c.seed is not None else "token not seen"
        text = f"the resumed forward fed position {c.fed} ({token})"
        if r is not None and r.pos is not None:
            text += f" to a state {_relation(r)} reference after {r.pos} positions ({_how(r)})"
            if c.double_feed:
                text += f": position {c.fed} fed twice"
        parts.append(text)
    return "; ".join(parts)


_Seams = dict[str, dict[str, Any]]


def _slot_reused(seams: _Seams, states: list[dict[str, Any]]) -> bool | None:
    """Did another request run a forward on the backup's recurrent slot between the backup and the restore (the
    window in which a backup that is a view of that slot, not a copy, would change)?"""
    b, r = seams["backup"], seams.get("restore")
    slot = b.get("mamba_slot")
    if r is None or slot is None:
        return None
    t0, t1 = float(b.get("t", 0.0)), float(r.get("t", 0.0))
    return any(
        e.get("mamba_slot") == slot and e.get("rid") != b.get("rid") and t0 < float(e.get("t", 0.0)) < t1
        for e in states
    )


def _held_changed(seams: _Seams) -> bool | None:
    b, r = seams["backup"], seams.get("restore")
    if r is None:
        return None
    copy, held = b.get("copy") or {}, r.get("held") or {}
    names = [n for n in copy if n.endswith("_state")]
    return any(copy.get(n) != held.get(n) for n in names) if names else None


def compare(
    pressured_log: Path,
    reference_log: Path,
    prompts: Sequence[Sequence[int]],
    diffs: Sequence[RequestDiff],
    burst: str | None = None,
) -> StateBytes:
    """Every retraction of the pressured decode (of BURST, one case's, in a many-case run) held against the reference
    decode's kept states; DIFFS (one per prompt of PROMPTS) bound the floor to the identical tokens."""
    press, ref = _Store(pressured_log, burst), _Store(reference_log, None)
    skipped = [
        e["bytes"]["skipped"] for e in press.events if isinstance(e.get("bytes"), dict) and "skipped" in e["bytes"]
    ]
    if not press.states or not ref.states:
        why = (
            f"a request's recurrent state is {max(skipped)} bytes, over the {_limit_words()} kept (--shrink keeps it "
            "small)"
            if skipped
            else "no state bytes were kept (a model without recurrent state, or no forward was traced)"
        )
        return StateBytes(False, why)
    keys = {prompt_key(p): i for i, p in reversed(list(enumerate(prompts)))}
    by_index = {d.index: d for d in diffs}
    first_retraction: dict[str, float] = {}
    for e in press.events:
        if e.get("event") == "backup":
            first_retraction.setdefault(str(e.get("prompt")), float(e.get("t", 0.0)))
    floor, counted = 0.0, 0
    for e in press.events:
        if e.get("event") != "state" or int(e.get("retraction", 0)) or str(e.get("prompt")) not in keys:
            continue
        i = keys[str(e["prompt"])]
        d = by_index.get(i)
        if str(e["prompt"]) in first_retraction and float(e.get("t", 0.0)) >= first_retraction[str(e["prompt"])]:
            continue
        if d is not None and d.diverged and d.position is not None and int(e["pos"]) > len(prompts[i]) + d.position:
            continue
        delta = _delta(press.read(e["bytes"]) or {}, ref.read(ref.states.get((str(e["prompt"]), int(e["pos"])))))
        if delta is not None:
            floor, counted = max(floor, delta), counted + 1
    report = StateBytes(True, floor=floor, floor_positions=counted)
    states = [e for e in press.events if e.get("event") == "state"]
    by_prompt: dict[int, list[dict[str, Any]]] = {}
    for e in press.events:
        if e.get("event") in ("backup", "restore", "forward") and str(e.get("prompt")) in keys:
            by_prompt.setdefault(keys[str(e["prompt"])], []).append(e)
    for i in sorted(by_prompt):
        prompt = prompt_key(prompts[i])
        cycles = []
        for n, seams in enumerate(retraction_cycles(by_prompt[i]), 1):
            b, f = seams["backup"], seams.get("forward")
            kv = b.get("kv_tokens")
            backed = press.read(b.get("bytes"))
            bm = _match(backed, prompt, ref, floor, {"kv": kv}) if backed is not None else None
            fed = f.get("fed") if f else None
            resumed_state = press.read(f.get("bytes")) if f else None
            rm = _match(resumed_state, prompt, ref, floor, {"fed": fed}) if resumed_state is not None else None
            double = None if rm is None or rm.pos is None or fed is None or not rm.clear else rm.pos > fed
            outputs = f.get("outputs") if f else None
            c = Cycle(
                n,
                kv,
                sorted(backed) if backed else [],
                bm,
                fed,
                f.get("seed") if f else None,
                outputs - 1 if isinstance(outputs, int) and outputs else None,
                rm,
                double,
                "",
                _slot_reused(seams, states),
                _held_changed(seams),
            )
            cycles.append(replace(c, sentence=_sentence(c)))
        d = by_index.get(i)
        report.requests.append(RequestBytes(i, bool(d and d.diverged), cycles))
    report.summary = _summary(report)
    return report


def _limit_words() -> str:
    return f"{STATE_BYTES // 1024} KiB"


def _summary(report: StateBytes) -> str:
    cycles = [c for r in report.requests for c in r.cycles]
    ahead = [c for c in cycles if c.backup and c.backup.clear and c.kv_tokens is not None and c.backup.pos is not None]
    over = sum(c.backup.pos > c.kv_tokens for c in ahead)  # type: ignore[union-attr,operator]
    step = sum(c.backup.pos == c.kv_tokens for c in ahead)  # type: ignore[union-attr]
    doubles = sum(bool(c.double_feed) for c in cycles)
    unmatched = len(cycles) - len(ahead)
    reused = [c for c in cycles if c.slot_reused]
    changed = sum(bool(c.held_changed) for c in reused)
    slots = (
        f"; {len(reused)} backups' slots ran another request before their restore, and {changed} of those copies "
        "changed while held"
        if any(c.slot_reused is not None for c in cycles)
        else ""
    )
    return (
        f"{len(cycles)} backups of {len(report.requests)} requests held against the reference decode's state (floor "
        f"max |Δ| {_fmt(report.floor)} over {report.floor_positions} positions): {over} hold the state of a position "
        f"past their KV backup, {step} the KV backup's own; {doubles} resumed forwards fed a position their state had "
        f"already absorbed{f'; {unmatched} near no reference position' if unmatched else ''}{slots}"
    )


def lines(report: StateBytes, shown: Sequence[int] = ()) -> list[str]:
    """The terminal's lines: the summary, then each retraction of the requests SHOWN (the changed ones)."""
    if not report.kept:
        return [f"state bytes: not compared ({report.reason})"]
    out = [f"state bytes: {report.summary}"]
    wanted = set(shown)
    rows = [r for r in report.requests if r.index in wanted]
    for r in rows[:SHOWN]:
        out += [f"request {r.index} {c.sentence}" for c in r.cycles]
    if len(rows) > SHOWN:
        out.append(f"… {len(rows) - SHOWN} more requests in the JSON (state_trace.state_bytes)")
    return out
