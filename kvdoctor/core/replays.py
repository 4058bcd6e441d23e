"""How kvdoctor replays a public bug: one :class:`Replay` record per replayed bug, the cases ``kvdoctor replay`` runs.

A replay runs the bug's *subject* (its fault armed inside a real server, or the real server alone when the bug needs
no fault: row 0's overlap finding) beside its *control* (the same scenario without the fault, or with the bug's
workaround), and passes only when the control is green for the right reason (the scenario's proof gate says the
path ran: a retraction, a prefix hit, a transfer) and the subject is red for the right reason (the tokens or
logprobs diverge with every guard that gives the check its teeth passed, the fault seen firing, the component
named), or, for a loud bug, the subject's server dies with its own error line (exit 3).

Each server's cases live in its room (``core/<server>/replays.py``), named by one line of :data:`_ROOMS`, as the
fault records are; a case whose fault is not registered yet (``kvdoctor.core.faults``: a helper is building it) is
listed in its room's ``PENDING`` tuple, never in ``REPLAYS``, and is reported, not run
(``tests/core/test_replays.py`` holds both lists to the registry). Torch-free.
"""

from __future__ import annotations

import importlib
import shlex
from enum import Enum
from functools import cache

from kvdoctor.core import bugs, paths
from kvdoctor.core.faults import Target
from kvdoctor.core.record import record

__all__ = ["Expect", "Outcome", "Replay", "get", "pending", "replays"]


class Outcome(str, Enum):
    """What the subject of a replay must show."""

    RED = "red"  # exit 1: tokens (or logprobs) diverge from the reference, the component named
    LOUD = "loud"  # exit 3: the subject's server dies with its own error line, never a hang or a score


RECURRENT = ("conv_state", "temporal_state", "side_state")  # the state digests' recurrent components


@record(frozen=True)
class Expect:
    """The subject's outcome. ``components``: the state components the first divergence may be attributed to
    (empty: any); ``line``: for a loud bug, the text the server's own error line holds."""

    outcome: Outcome
    components: tuple[str, ...] = ()
    line: str = ""


@record(frozen=True)
class Replay:
    """One replayed bug. ``bug``: its id (``kvdoctor.core.bugs``); ``fault``: the registered fault that replays it
    (None: the real server is the subject); ``subject_args`` / ``control_args``: server flags each side adds (row 0's
    control: ``--disable-overlap-schedule``); ``target``: consistency on real servers (``Target.SERVER``) or the
    engine round trip in-process (``Target.ENGINE``); ``proof``: the gate proving the path ran (default: the
    scenario's path's, :func:`kvdoctor.core.paths.proof_gate`; none for the round trip, whose rows are its proof);
    ``tokens``, ``layers``: an in-process round trip's size."""

    bug: str
    server: str
    model: str
    topology: str
    scenario: str
    fault: str | None
    expect: Expect
    target: Target = Target.SERVER
    subject_args: tuple[str, ...] = ()
    control_args: tuple[str, ...] = ()
    proof_gate: str | None = None
    note: str = ""
    tokens: int | None = None  # an in-process round trip's --tokens (None: its default)
    layers: int | None = None  # an in-process round trip's --layers (None: every layer)
    workload: tuple[tuple[str, int], ...] = ()  # a consistency run's workload options (requests=16: --requests 16)

    @property
    def proof(self) -> str | None:
        return self.proof_gate or paths.proof_gate(self.scenario)

    @property
    def in_process(self) -> bool:
        """Run by the engine round trip in this interpreter (vLLM's), not by launching servers."""
        return self.target is Target.ENGINE

    def command(self, *, control: bool = False) -> str:
        """The command line that runs the subject (or, CONTROL, the control) by hand."""
        fault = None if control else self.fault
        args = self.control_args if control else self.subject_args
        inject = f" --inject {fault}" if fault else ""
        if self.in_process:
            sized = "".join(f" --{k} {v}" for k, v in (("tokens", self.tokens), ("layers", self.layers)) if v)
            flags = f" {shlex.join(args)}" if args else ""
            engine = f"--server {self.server} --engine {self.server}"
            return f"kvdoctor roundtrip {self.model} {engine}{sized}{inject}{flags}"
        flags = f" -- {shlex.join(args)}" if args else ""
        sized = "".join(f" --{k.replace('_', '-')} {v}" for k, v in self.workload)
        return (
            f"kvdoctor consistency {self.model} --shrink --server {self.server} --topology {self.topology} "
            f"--scenario {self.scenario}{sized}{inject}{flags}"
        )


# One line per server: the room holding its cases (``REPLAYS``: faults registered; ``PENDING``: not yet).
_ROOMS: dict[str, str] = {
    "sglang": "kvdoctor.core.sglang.replays",
    "vllm": "kvdoctor.core.vllm.replays",
}


def _room(name: str) -> tuple[tuple[Replay, ...], tuple[Replay, ...]]:
    module = importlib.import_module(_ROOMS[name])
    return tuple(module.REPLAYS), tuple(getattr(module, "PENDING", ()))


@cache
def replays() -> tuple[Replay, ...]:
    """Every case that runs (its fault registered), rooms in the table's order."""
    return tuple(r for name in _ROOMS for r in _room(name)[0])


@cache
def pending() -> tuple[Replay, ...]:
    """The cases waiting for their fault to be registered (reported by ``kvdoctor replay --list``, never run)."""
    return tuple(r for name in _ROOMS for r in _room(name)[1])


def get(bug_id: str) -> Replay:
    """The case replaying BUG_ID; KeyError saying whether it is pending or has no case."""
    want = bug_id.strip().lower()
    for r in replays():
        if r.bug == want:
            return r

    if want not in bugs.ids():
        raise KeyError(f"{bug_id}: no such bug (kvdoctor replay --list lists the cases; docs/bugs.md every bug)")
    waiting = next((r for r in pending() if r.bug == want), None)
    if waiting is not None:
        raise KeyError(f"{bug_id} is not replayed yet: its fault {waiting.fault} is not registered")
    raise KeyError(f"{bug_id} has no replay case (replayed: {', '.join(r.bug for r in replays())})")
