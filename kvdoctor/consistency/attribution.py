"""Why tokens diverged: the pressured decode's state trace joined with the token comparison.

The trace (``digests.jsonl`` in the run directory, written inside the server by
:mod:`kvdoctor.engines.sglang.digests`) has, per retraction of a request, three events: ``backup``
(live slots and the host copy), ``restore`` (the copy as held, the live slots after loading) and
``forward`` (the live slots before the request's next forward, and the position it feeds), each with a
digest per component and the positions the KV and the recurrent state cover. Requests are matched to
kvdoctor's prompts by a digest of their token ids.

For every request that diverged or was retracted, the seams are checked in the order the state
travels, and the first disagreement names the component and the seam:

1. backup: the copy holds what the live slots held (``backup_lost``), and the recurrent state covers
   the positions the KV backup covers (``state_ahead`` / ``state_behind``);
2. restore: the copy did not change while held (``held_changed``; when it changed with the slots it was
   taken from, it is a view of the live pool, not a copy); the live slots after loading hold the copy
   (``restore_differs``);
3. forward: nothing rewrote the slots before the next forward (``rewritten``); it feeds the first
   position the restored KV does not hold (``fed_mismatch``).

A request with no disagreement made the round trip (``round_trip``: the proof, per component); a
diverging request that was never retracted is named as such (``not_retracted``: the noise floor or
another path). Every verdict of a seam carries the SGLang source that moved the bytes there; with a fault
installed, kvdoctor's (``--inject``) or the user's own (``--fault-file``: INJECTED_BY says which), a disagreement is
the fault's, not SGLang's: no SGLang source, and the finding names the fault (``injected``, ``injected_by``). A fault
in a server's log of a run that asked for none (a leaked control variable, a user's own hook) is nobody's finding:
the disagreements are reported without SGLang's source, and :func:`unrequested_gates` turns the verdict red and
unknown. Pure: no torch, no SGLang.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kvdoctor.consistency import gates
from kvdoctor.consistency.compare import RequestDiff
from kvdoctor.core.cite import Cite
from kvdoctor.engines import hook_log
from kvdoctor.engines.sglang.digests import ORDER, RECURRENT, prompt_key

DIGEST_LOG = "digests.jsonl"
REFERENCE_DIGEST_LOG = "digests-reference.jsonl"  # the reference decode's: only the state bytes it keeps
STATE_BYTES = 64 * 1024  # keep a request's recurrent state when it is at most this (a shrunk model's: a few KiB)
MAX_SHOWN = 12
UNREQUESTED = "unrequested_fault"  # the gate's reason: a fault ran inside a server of a run without --inject
INJECT, FAULT_FILE = "--inject", "--fault-file"  # who installed the run's fault (attribute's injected_by)

OVERLAP_LOOP = Cite("sglang", "srt/disaggregation/decode.py", "get_next_disagg_decode_batch_to_run", 3189, 3218)
OVERLAP_DROP = Cite("sglang", "srt/managers/scheduler_components/batch_result_processor.py", "is_retracted", 1021, 1026)
OFFLOAD = Cite("sglang", "srt/managers/schedule_batch.py", "offload_kv_cache", 2109, 2128)
LOAD = Cite("sglang", "srt/managers/schedule_batch.py", "load_kv_cache", 2130, 2148)
RESUME = Cite("sglang", "srt/disaggregation/decode.py", "resume_retracted_reqs", 1021, 1100)
HYBRID_COPY = Cite("sglang", "srt/mem_cache/memory_pool.py", "get_cpu_copy", 4582, 4589)
MAMBA_COPY = Cite("sglang", "srt/mem_cache/memory_pool.py", "get_cpu_copy", 1208, 1221)
CITES: dict[str, tuple[Cite, ...]] = {
    "state_ahead_overlap": (OVERLAP_LOOP, OVERLAP_DROP, OFFLOAD),
    "state_ahead": (OFFLOAD,),
    "state_behind": (OFFLOAD,),
    "backup_lost": (OFFLOAD,),
    "held_changed": (OFFLOAD,),
    "held_view": (OFFLOAD, HYBRID_COPY, MAMBA_COPY),
    "restore_differs": (LOAD,),
    "fed_mismatch": (LOAD,),
    "rewritten": (RESUME,),
}
WHAT = {
    "round_trip": "every component made the round trip",
    "not_retracted": "never retracted: the noise floor or another path",
    "state_ahead": "the recurrent state was backed up ahead of the KV",
    "state_behind": "the recurrent state was backed up behind the KV",
    "backup_lost": "the backup does not hold what the live slots held",
    "held_changed": "the host copy changed while it was held",
    "restore_differs": "the restored slots do not hold the host copy",
    "rewritten": "the slots were rewritten between the restore and the next forward",
    "fed_mismatch": "the next forward does not start where the restored KV ends",
    "incomplete": "the trace of a retraction is incomplete",
}
EXPLAIN = {  # why, where SGLang's source says it (printed once, in the finding)
    "state_ahead_overlap": (
        "the forward in flight at retraction (overlap schedule) had advanced the state in place and its token "
        "was dropped, so the resumed request feeds that position twice"
    ),
    "held_view": (
        "Req.offload_kv_cache passes the 0-dim mamba_pool_idx: conv[:, idx] is then a view, and .to('cpu') of a "
        "CPU tensor returns it as is"
    ),
}


@dataclass
class RequestTrace:
    index: int
    diverged: bool
    within_noise: bool
    position: int | None
    retractions: int
    verdict: str
    drift: float | None = None  # identical tokens, logprobs drifting beyond the noise floor (gates.logprobs)
    component: str | None = None
    seam: str | None = None  # "backup 2", "restore 1", "forward 1"
    detail: str = ""
    why: str = ""  # the mechanism, where SGLang's source shows it
    cite: list[str] = field(default_factory=list)
    components: list[str] = field(default_factory=list)  # what was compared
    issues: list[dict[str, Any]] = field(default_factory=list)  # every disagreement, in seam order
    cycles: list[dict[str, Any]] = field(default_factory=list)

    def line(self) -> str:
        if self.diverged:
            head = f"request {self.index} (diverges at token {self.position})"
        elif self.drift is not None:
            head = f"request {self.index} (identical tokens, logprobs drift by {self.drift:.2g})"
        else:
            head = f"request {self.index} (identical)"
        times = f"retracted {self.retractions}×" if self.retractions else "never retracted"
        if self.verdict == "not_retracted":
            return f"{head}: {WHAT['not_retracted']}"
        if self.verdict == "round_trip":
            return f"{head}: {times}; {self.detail}"
        where = f" [{'; '.join(c.split(' (')[0] for c in self.cite)}]" if self.cite else ""
        others = sorted(
            {f"{i['component']} {i['verdict']}" for i in self.issues[1:] if i["kind"] != self.issues[0]["kind"]}
        )
        more = f" (also: {', '.join(others)})" if others else ""
        return (
            f"{head}: {times}; {self.component or 'state'} first disagrees at {self.seam}: {self.detail}{where}{more}"
        )


@dataclass
class StateTrace:
    log: str
    recorded: bool = False
    overlap: bool | None = None
    backups: int = 0
    restores: int = 0
    forwards: int = 0
    complete: bool = False
    failure: str | None = None
    unmatched: int = 0
    requests: list[RequestTrace] = field(default_factory=list)
    finding: dict[str, Any] | None = None
    state_bytes: dict[str, Any] | None = None  # kvdoctor.consistency.state_bytes: which state each backup holds

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        """What the terminal shows: the trace in one line, each diverging request, the rest summed up."""
        if not self.recorded:
            why = f": {self.failure}" if self.failure else ""
            return [f"state trace: none recorded ({self.log}){why}"]
        schedule = {True: "overlap schedule on", False: "overlap schedule off", None: "schedule unknown"}[self.overlap]
        out = [
            f"state trace: {self.backups} backups, {self.restores} restores, {self.forwards} next forwards traced "
            f"({schedule}){'' if self.complete else '; INCOMPLETE' + (f': {self.failure}' if self.failure else '')}"
        ]
        red = [r for r in self.requests if r.diverged or r.drift is not None]
        out += [r.line() for r in red[:MAX_SHOWN]]
        if len(red) > MAX_SHOWN:
            out.append(f"… {len(red) - MAX_SHOWN} more diverging requests in the JSON (state_trace)")
        same = [r for r in self.requests if not r.diverged and r.drift is None and r.retractions]
        if same:
            proven = [r for r in same if r.verdict == "round_trip"]
            odd = sorted({r.verdict for r in same if r.verdict != "round_trip"})
            tail = f"; {len(same) - len(proven)} show {', '.join(odd)} without a token change" if odd else ""
            comps = ", ".join(sorted({c for r in proven for c in r.components}, key=_rank))
            out.append(
                f"{len(same)} identical requests were retracted: {len(proven)} made every round trip"
                f"{f' ({comps}: digests and positions agree)' if proven else ''}{tail}"
            )
        if self.finding:
            out.append(f"finding: {self.finding['sentence']}")
        return out


def _rank(name: str) -> int:
    return ORDER.index(name) if name in ORDER else len(ORDER)


def read_events(path: Path, burst: str | None = None) -> tuple[list[dict[str, Any]], int]:
    """The events after the last ``burst`` marker (the pressured burst), or, BURST given (one case of a many-case
    run), those after the marker named BURST up to the next marker; the scheduler's own events always; and how many
    lines were unreadable."""
    if not path.exists():
        return [], 0
    events: list[dict[str, Any]] = []
    bad = 0
    current: str | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if not isinstance(event, dict):
            continue
        if event.get("event") == "burst":
            current = event.get("name")
            if burst is None:
                events = [e for e in events if e.get("event") == "scheduler"]
        elif burst is None or current == burst or event.get("event") == "scheduler":
            events.append(event)
    return events, bad


def mark_burst(path: Path, name: str, t: float) -> None:
    """Append the marker the reader cuts at (the server appends to the same file; one short line is atomic)."""
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"event": "burst", "name": name, "t": t}) + "\n")


def _same(a: str | None, b: str | None) -> bool:
    return a is not None and a == b


def _bytes(d: str | None) -> int:
    return int(d.rsplit(":", 1)[1]) if d and ":" in d else 0


def _first_diff(left: dict[str, str], right: dict[str, str], *, need: bool) -> str | None:
    """The first component (in state order) whose digests differ; NEED: a component of LEFT must be in RIGHT."""
    for comp in sorted(left, key=_rank):
        if comp in right:
            if not _same(left[comp], right[comp]):
                return comp
        elif need and _bytes(left[comp]):
            return comp
    return None


def retraction_cycles(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``{"backup": …, "restore": …, "forward": …}`` per retraction of one request, in time order (a seam missing
    when it was not seen)."""
    cycles: list[dict[str, Any]] = []
    for e in sorted(events, key=lambda e: e.get("t", 0.0)):
        kind = e.get("event")
        if kind == "backup":
            cycles.append({"backup": e})
        elif kind in ("restore", "forward") and cycles and kind not in cycles[-1]:
            cycles[-1][kind] = e
    return cycles


@dataclass(frozen=True)
class Issue:
    verdict: str
    component: str | None
    seam: str
    detail: str


def _check(cycle: dict[str, Any], n: int) -> list[Issue]:
    """Every disagreement of one retraction, in the order the state travels (``incomplete`` ends it)."""
    b, r, f = cycle.get("backup"), cycle.get("restore"), cycle.get("forward")
    out: list[Issue] = []
    copy = b.get("copy", {})
    comp = _first_diff(b["live"], copy, need=True)
    if comp is not None:
        got = f"{_bytes(copy[comp])} bytes" if comp in copy else "nothing"
        out.append(
            Issue(
                "backup_lost",
                comp,
                f"backup {n}",
                f"the live slots held {_bytes(b['live'][comp])} bytes, the copy {got}",
            )
        )
    kv, pos = b.get("kv_tokens"), b.get("state_pos")
    recurrent = [c for c in sorted(b["live"], key=_rank) if c in RECURRENT and _bytes(b["live"][c])]
    if recurrent and pos is not None and kv is not None and pos != kv:
        fed = f"; the resumed forward fed position {f['fed']}" if f and f.get("fed") is not None else ""
        out.append(
            Issue(
                "state_ahead" if pos > kv else "state_behind",
                recurrent[0],
                f"backup {n}",
                f"the backup holds the recurrent state after {pos} positions, the KV backup {kv} positions{fed}",
            )
        )
    if r is None:
        return [*out, Issue("incomplete", None, f"restore {n}", "no restore was recorded")]
    held = r.get("held", {})
    comp = _first_diff(copy, held, need=True)
    if comp is not None:
        old = r.get("old_live", {})
        slot = b.get("mamba_slot") if comp in RECURRENT else None
        follows = (
            f": it changed with the slot it was taken from{f' (mamba slot {slot})' if slot is not None else ''}, "
            "so it is a view of the live pool, not a copy"
            if _same(old.get(comp), held.get(comp))
            else ""
        )
        out.append(
            Issue(
                "held_changed", comp, f"restore {n}", f"the copy's digest at restore is not the one at backup{follows}"
            )
        )
    comp = _first_diff(held, r.get("live", {}), need=True)
    if comp is not None:
        out.append(Issue("restore_differs", comp, f"restore {n}", "the live slots after loading do not hold the copy"))
    if f is None:
        return [*out, Issue("incomplete", None, f"forward {n}", "no forward after the restore was recorded")]
    comp = _first_diff(r.get("live", {}), f.get("live", {}), need=True)
    if comp is not None:
        out.append(
            Issue("rewritten", comp, f"forward {n}", "the slots changed between the restore and the next forward")
        )
    if f.get("fed") is not None and f["fed"] != r.get("kv_tokens"):
        out.append(
            Issue(
                "fed_mismatch",
                "full_kv",
                f"forward {n}",
                f"the forward fed position {f['fed']}, the restored KV holds {r.get('kv_tokens')} positions",
            )
        )
    if recurrent and pos is None:
        out.append(Issue("incomplete", None, f"backup {n}", "the recurrent state's position was not known at backup"))
    return out


def _cite(issue: Issue, overlap: bool | None) -> tuple[str, tuple[Cite, ...]]:
    """The key of WHAT/CITES for ISSUE, and the SGLang source that moved the bytes at its seam."""
    if issue.verdict == "state_ahead" and overlap:
        return "state_ahead_overlap", CITES["state_ahead_overlap"]
    if issue.verdict == "held_changed" and issue.component in RECURRENT and "a view of the live pool" in issue.detail:
        return "held_view", CITES["held_view"]
    return issue.verdict, CITES.get(issue.verdict, ())


def unrequested_fault(lines: Iterable[str] | hook_log.EventLog, injected: str | None) -> str | None:
    """The first fault event (``EVENT DETAIL``) in a server log (its LINES, or as ``hook_log`` read it) of a run
    without ``--inject``, else None."""
    log = lines if isinstance(lines, hook_log.EventLog) else hook_log.parse(lines)
    found = [] if injected else log.faults()
    return found[0] if found else None


def unrequested_gates(lines: Iterable[str] | hook_log.EventLog, injected: str | None) -> list[gates.Gate]:
    """A red gate when a fault ran inside the servers of a run that asked for none (INJECTED: the ``--inject``):
    whatever diverged is then the fault's, and what the run says about the server is unknown."""
    event = unrequested_fault(lines, injected)
    if event is None:
        return []
    message = (
        f"a fault nobody asked for ran inside the servers ({event}) in a run without --inject: the verdict is "
        "unknown, not a finding about the server (kvdoctor sets its servers' KVDOCTOR_* variables itself; "
        "is a hook of your own setting one?)"
    )
    return [gates.Gate("fault", False, UNREQUESTED, message)]


def _note(injected: str | None, unrequested: str | None, by: str = INJECT) -> str:
    """Why a disagreement is not the server's, when it is not (a fault ran on this path; BY: who installed it)."""
    if injected and by == FAULT_FILE:
        return f" (your --fault-file {injected} is installed on this path)"
    if injected:
        return f" (kvdoctor's --inject {injected} is installed on this path)"
    if unrequested:
        return f" (a fault nobody asked for ran inside the server: {unrequested})"
    return ""


def _request(
    d: RequestDiff,
    events: list[dict[str, Any]],
    overlap: bool | None,
    injected: str | None,
    unrequested: str | None = None,
    by: str = INJECT,
) -> RequestTrace:
    cycles = retraction_cycles(events)
    t = RequestTrace(d.index, d.diverged, d.within_noise, d.position, len(cycles), "round_trip", cycles=cycles)
    if not cycles:
        t.verdict, t.detail = "not_retracted", WHAT["not_retracted"]
        return t
    t.components = sorted({c for cy in cycles for c in cy["backup"].get("live", {})}, key=_rank)
    for n, cycle in enumerate(cycles, 1):
        for issue in _check(cycle, n):
            key, cites = _cite(issue, overlap)
            note = _note(injected, unrequested, by)
            detail = issue.detail + note
            why = "" if note else EXPLAIN.get(key, "")
            shown = [] if note else [str(c) for c in cites]
            t.issues.append({**asdict(issue), "detail": detail, "why": why, "kind": key, "cite": shown})
    first = t.issues[0] if t.issues else None  # an incomplete trace proves nothing, but a disagreement stands
    if first is not None:
        t.verdict, t.component, t.seam = first["verdict"], first["component"], first["seam"]
        t.detail, t.why, t.cite = first["detail"], first["why"], list(first["cite"])
        return t
    pos = [cy["backup"].get("kv_tokens") for cy in cycles]
    t.detail = (
        f"every component made the round trip ({', '.join(t.components)}: backup = copy = restore = next "
        f"forward; positions {', '.join(str(k) for k in pos)} agree)"
    )
    return t


def attribute(
    path: Path,
    prompts: Sequence[Sequence[int]],
    diffs: Sequence[RequestDiff],
    *,
    injected: str | None = None,
    failure: str | None = None,
    drifted: Sequence[int] = (),
    unrequested: str | None = None,
    burst: str | None = None,
    injected_by: str = INJECT,
) -> StateTrace:
    """Join the trace at PATH with the comparison DIFFS (one per prompt of PROMPTS, in order); INJECTED: the run's
    fault (its name), installed by INJECTED_BY (``--inject``, or ``--fault-file``: the user's own): then a
    disagreement is the fault's, not SGLang's; DRIFTED: the requests whose logprobs drift with identical tokens
    (``compare.drift``); UNREQUESTED: the fault event that ran inside the server of a run that asked for none
    (:func:`unrequested_fault`): then nothing is SGLang's; BURST: the case's burst of a many-case run
    (:func:`read_events`)."""
    trace = StateTrace(str(path), failure=failure)
    events, bad = read_events(path, burst)
    schedulers = [e for e in events if e.get("event") == "scheduler"]
    trace.recorded = bool(schedulers)
    if not trace.recorded:
        return trace
    trace.overlap = bool(schedulers[-1].get("overlap"))
    index = {prompt_key(p): i for i, p in reversed(list(enumerate(prompts)))}
    by_request: dict[int, list[dict[str, Any]]] = {}
    for e in events:
        kind = e.get("event")
        if kind not in ("backup", "restore", "forward"):
            continue
        trace.backups += kind == "backup"
        trace.restores += kind == "restore"
        trace.forwards += kind == "forward"
        i = index.get(str(e.get("prompt")))
        if i is None:
            trace.unmatched += 1
            continue
        by_request.setdefault(i, []).append(e)
    drifting = set(drifted)
    for d in diffs:
        if d.diverged or d.index in by_request or d.index in drifting:
            t = _request(d, by_request.get(d.index, []), trace.overlap, injected, unrequested, injected_by)
            if d.index in drifting and not d.diverged:
                t.drift = d.max_abs_dlogprob
            trace.requests.append(t)
    incomplete = any(r.verdict == "incomplete" for r in trace.requests)
    trace.complete = not (failure or bad or incomplete or trace.backups != trace.restores)
    trace.finding = _finding(trace, injected, unrequested, injected_by)
    return trace


def _finding(
    trace: StateTrace, injected: str | None, unrequested: str | None = None, by: str = INJECT
) -> dict[str, Any] | None:
    """What the diverging requests share: each kind of disagreement, how many diverging (and identical
    retracted) requests show it, and SGLang's source (none when a fault was installed: INJECTED, by BY); the most
    common first."""
    red = [r for r in trace.requests if (r.diverged and not r.within_noise) or r.drift is not None]
    if not red:
        return None
    red_ids = {r.index for r in red}
    kinds: dict[tuple[str, str], dict[str, Any]] = {}
    for r in trace.requests:
        for issue in r.issues:
            if issue["verdict"] == "incomplete":
                continue
            k = kinds.setdefault(
                (issue["kind"], issue["component"] or ""),
                {"issue": issue, "diverging": set(), "identical": set(), "retractions": 0},
            )
            k["diverging" if r.index in red_ids else "identical"].add(r.index)
            k["retractions"] += 1
    ranked = sorted(kinds.values(), key=lambda k: (-len(k["diverging"]), -len(k["identical"])))
    never = [r.index for r in red if r.verdict == "not_retracted"]
    proven = [r.index for r in red if r.verdict == "round_trip"]
    parts = []
    for k in ranked:
        issue = k["issue"]
        also = f" and {len(k['identical'])} identical" if k["identical"] else ""
        where = f" [{'; '.join(issue['cite'])}]" if issue["cite"] else ""
        why = f" ({issue['why']})" if issue["why"] else ""
        parts.append(
            f"{issue['component']}: {WHAT[issue['verdict']]}{why} in {k['retractions']} retractions of "
            f"{len(k['diverging'])} diverging or drifting{also} requests{where}"
        )
    if never:
        parts.append(f"{len(never)} diverging or drifting requests were never retracted (noise floor or another path)")
    if proven:
        parts.append(f"{len(proven)} diverging or drifting requests made every round trip (not in the moved bytes)")
    if unrequested:
        parts.insert(
            0, f"unknown: a fault nobody asked for ran inside the server ({unrequested}); nothing here is SGLang's"
        )
    elif injected and by == FAULT_FILE:
        parts.insert(
            0, f"the fault's: your --fault-file {injected} was installed on this path; nothing here is SGLang's"
        )
    top = ranked[0]["issue"] if ranked and ranked[0]["diverging"] else None
    return {
        "verdict": top["verdict"] if top else ("round_trip" if proven else "not_retracted"),
        "component": top["component"] if top else None,
        "requests": [r.index for r in red],
        "injected": injected,
        "injected_by": by if injected else None,
        "unrequested": unrequested,
        "cite": list(top["cite"]) if top else [],
        "kinds": [
            {
                "kind": k["issue"]["kind"],
                "component": k["issue"]["component"],
                "diverging": sorted(k["diverging"]),
                "identical": sorted(k["identical"]),
                "retractions": k["retractions"],
                "cite": k["issue"]["cite"],
            }
            for k in ranked
        ],
        "sentence": "; ".join(parts),
    }
