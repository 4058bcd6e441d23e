"""The state paths a request's state takes, one record each: the scenario that runs it, the gate that proves it ran,
and how a fault on it is judged.

A *state path* is a way a request's state leaves its slot and comes back (or moves on): backed up and restored on
retraction, dropped and recomputed on preemption, sent from a prefill to a decode, served from a prefix cache,
stored to a CPU tier, left behind by a sliding window. Faults act on one path each (``kvdoctor.core.faults``),
scenarios run one or more (``kvdoctor.consistency.scenarios``, whose table the scenario names here key), bugs and
replays name theirs. One record per path (:data:`PATHS`) holds what the rest of kvdoctor asks of it:

- ``scenario``: the ``kvdoctor consistency --scenario`` that runs it, so a fault on the path runs there and nowhere
  else (a refusal, exit 2, elsewhere);
- ``proof_gate``: the gate of that scenario's run that proves the path ran (a replay's control is green for the
  right reason only with it: ``kvdoctor.core.replays``);
- ``acts_on``: the fault-fired gate's default words for a fault on the path (a fault's own record may word it
  better: :attr:`kvdoctor.core.faults.Fault.acts_on`); None where the path has no fault-fired gate (retraction:
  its faults are counted as the backups and restores that ran through them, and the pressure gate proves those ran).

Read at CLI start-up (``faults`` lists paths), so it imports nothing heavy.
"""

from __future__ import annotations

from enum import Enum
from functools import cache
from typing import Protocol

from kvdoctor.core.record import record

__all__ = ["DEFAULT_SCENARIO", "PATHS", "ActsOn", "PathRecord", "StatePath", "acts_on", "get", "proof_gate"]


class StatePath(str, Enum):
    """The path a request's state takes that a fault breaks."""

    RETRACTION = "retraction"  # backed up to CPU, restored (SGLang's retraction)
    PREEMPTION = "preemption"  # dropped and recomputed (vLLM's preemption)
    TRANSFER = "transfer"  # sent from prefill to decode (PD)
    PREFIX_HIT = "prefix-hit"  # served from the prefix cache
    OFFLOAD = "offload"  # stored to and loaded from a CPU tier (vLLM's OffloadingConnector)
    SLIDING_WINDOW = "sliding-window"  # tokens leaving a sliding window


@record(frozen=True)
class ActsOn:
    """How the fault-fired gate words what a fault acted on: ``on`` when it fired (``{n}``: how many times),
    ``absent`` when it never did (what the run lacked for it to fire)."""

    on: str
    absent: str


@record(frozen=True)
class PathRecord:
    """One state path: the scenario that runs it, the gate that proves it ran there, the fault-fired gate's
    default words (None: the path has no fault-fired gate)."""

    path: StatePath
    scenario: str  # a name of kvdoctor.consistency.scenarios.SCENARIOS
    proof_gate: str  # a gate name of that scenario's run (kvdoctor.consistency.gates)
    acts_on: ActsOn | None


# The scenario a consistency run takes unless told (``--scenario``'s default).
DEFAULT_SCENARIO = "preempt"

PATHS: tuple[PathRecord, ...] = (
    # The pressure gate proves the retractions; a fault on them is counted as the backups and restores through it.
    PathRecord(StatePath.RETRACTION, DEFAULT_SCENARIO, "pressure", None),
    PathRecord(
        StatePath.PREEMPTION,
        DEFAULT_SCENARIO,
        "pressure",
        ActsOn("zeroed the state of {n} resumed request(s)", "no request was resumed from preemption"),
    ),
    PathRecord(
        StatePath.TRANSFER,
        "transfer",
        "transfer",  # kvdoctor's observer saw every request sent by the prefill and committed by the decode
        ActsOn(
            "broke the transferred state of {n} request(s)",
            "no request crossed the PD transfer while it was armed",
        ),
    ),
    PathRecord(
        StatePath.PREFIX_HIT,
        "prefix-cache",
        "prefix-cache",  # the hit-phase requests hit the subject's prefix cache, the reference's did not
        ActsOn(
            "zeroed the cached prefix blocks of {n} request(s) that hit the prefix cache",
            "no request got blocks from the prefix cache",
        ),
    ),
    PathRecord(
        StatePath.OFFLOAD,
        "offload",
        "offload",  # the pressured server loaded blocks from its CPU tier (beside the pressure gate)
        ActsOn("completed {n} load(s) from the CPU tier without copying", "the offloading worker loaded nothing"),
    ),
    PathRecord(
        StatePath.SLIDING_WINDOW,
        DEFAULT_SCENARIO,  # a request decoding past its window: preempt's run, its pressure gate the proof
        "pressure",
        ActsOn(
            "freed in-window SWA slots at {n} window eviction(s)",
            "no request decoded past its sliding window by SGLang's eviction interval (SGLANG_SWA_EVICTION_INTERVAL, "
            "128 tokens by default: raise --max-new-tokens until prompt and new tokens pass the window by that much)",
        ),
    ),
)


@cache
def get(path: StatePath | str) -> PathRecord:
    """PATH's record (KeyError naming the paths for one without)."""
    for p in PATHS:
        if p.path == path:
            return p
    raise KeyError(f"no state path {path!r} (known: {', '.join(p.path.value for p in PATHS)})")


def proof_gate(scenario: str) -> str | None:
    """The gate proving SCENARIO's path ran (every path a scenario runs is proven by one gate); None for a scenario
    no path runs in (a replay's in-process round trip, whose rows are its proof)."""
    return {p.scenario: p.proof_gate for p in PATHS}.get(scenario)


class OnAPath(Protocol):
    """What :func:`acts_on` reads of a fault record (:class:`kvdoctor.core.faults.Fault`)."""

    @property
    def path(self) -> StatePath: ...

    @property
    def acts_on(self) -> ActsOn | None: ...


def acts_on(fault: OnAPath, server_words: ActsOn | None = None) -> ActsOn | None:
    """How the fault-fired gate words FAULT: its own record's words, else SERVER_WORDS (how the server running it
    words the fault's path, ``kvdoctor.core.consistency_facts``), else its path's; None: no fault-fired gate."""
    return fault.acts_on or server_words or get(fault.path).acts_on
