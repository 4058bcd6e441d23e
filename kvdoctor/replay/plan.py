"""Which bugs a ``kvdoctor replay`` runs, and on how few deployments: the selection and the grouping.

The replay cases (``kvdoctor.core.replays``) that share a server, model, topology, scenario and extra server flags
run on ONE deployment (:class:`Group`): its reference and its subject launched once, each case's fault armed inside
the subject at run time (``kvdoctor.consistency.run.run_cases``). A case whose fault cannot be armed at run time
(its registry record says ``switchable=False``) gets a launch of its own; a loud one (its fault kills the subject's
server) runs last on the shared launch, since nothing can run on that subject after it. A bug's control is the case
without a fault in the group of its control flags (row 0's control: the group with ``--disable-overlap-schedule``);
bugs that share a group share that control, and two bugs replayed by the same fault share its run. Pure: nothing
here starts anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kvdoctor._exceptions import InputError
from kvdoctor.consistency.case import Case
from kvdoctor.core import faults, replays
from kvdoctor.core.record import record
from kvdoctor.core.replays import Outcome, Replay

__all__ = ["NO_FAULT", "Case", "Group", "GroupKey", "Side", "groups", "select", "side"]

NO_FAULT = "no-fault"  # the name of a group's case without a fault (the control, or row 0's real-server subject)


@record(frozen=True)
class GroupKey:
    """What one deployment is: cases with the same key share its launches."""

    server: str
    model: str
    topology: str
    scenario: str
    args: tuple[str, ...]
    in_process: bool  # the engine round trip in this interpreter (no deployment)
    size: tuple[tuple[str, int], ...] = ()  # an in-process round trip's tokens and layers, when set
    workload: tuple[tuple[str, int], ...] = ()  # a consistency run's workload options, when set

    @property
    def label(self) -> str:
        flags = f" -- {' '.join(self.args)}" if self.args else ""
        return f"{self.server} {self.model} {self.topology} {self.scenario}{flags}"


@record(frozen=True)
class Group:
    """One deployment's cases: ``shared`` run on one launch (the control first), ``own`` each on a launch of its
    own (not switchable at run time)."""

    key: GroupKey
    shared: tuple[Case, ...]
    own: tuple[Case, ...] = ()

    @property
    def cases(self) -> tuple[Case, ...]:
        return (*self.shared, *self.own)

    @property
    def launches(self) -> int:
        """Deployments this group starts (the in-process round trip starts none)."""
        if self.key.in_process:
            return 0
        return (1 if self.shared else 0) + len(self.own)


@record(frozen=True)
class Side:
    """Where one side of a replay is measured: its group and its case there."""

    key: GroupKey
    case: Case


def _key(r: Replay, args: tuple[str, ...]) -> GroupKey:
    size = tuple((k, v) for k, v in (("tokens", r.tokens), ("layers", r.layers)) if v is not None)
    return GroupKey(r.server, r.model, r.topology, r.scenario, tuple(args), r.in_process, size, r.workload)


def _case(fault: str | None) -> Case:
    return Case(fault or NO_FAULT, fault)


def side(r: Replay, *, control: bool) -> Side:
    """Where R's control (or subject) is measured."""
    if control:
        return Side(_key(r, r.control_args), _case(None))
    return Side(_key(r, r.subject_args), _case(r.fault))


def select(bug_ids: Sequence[str], *, every: bool, pending: bool = False) -> tuple[Replay, ...]:
    """The cases to run: every one (``--all``) or those of BUG_IDS (``--bug``, in the order given, repeats
    dropped); ``InputError`` (exit 2, one line) for an unknown id, a pending one (unless PENDING: ``--list`` shows
    them), or neither / both given."""
    if every and bug_ids:
        raise InputError("give --bug ID or --all, not both")
    if every:
        return replays.replays()
    if not bug_ids:
        raise InputError("name the bugs to replay: --bug ID (repeatable) or --all (kvdoctor replay --list lists them)")
    waiting = {r.bug: r for r in replays.pending()} if pending else {}
    chosen: list[Replay] = []
    for bug_id in dict.fromkeys(b.strip().lower() for b in bug_ids):
        if bug_id in waiting:
            chosen.append(waiting[bug_id])
            continue
        try:
            chosen.append(replays.get(bug_id))
        except KeyError as exc:
            raise InputError(f"--bug {exc.args[0]}") from None
    return tuple(chosen)


def _own_launch(r: Replay | None, fault: str | None) -> bool:
    """A fault that cannot be armed at run time gets its own launch (a loud one that can be armed runs last on the
    shared launch: nothing runs on its subject after it)."""
    if fault is None:
        return False
    try:
        record_ = faults.get(fault, server=r.server, target=r.target) if r is not None else faults.get(fault)
    except KeyError:
        return True  # not one record to read switchable from: the safe way is its own launch
    return not record_.switchable


def _loud(r: Replay, control: bool) -> bool:
    return not control and r.fault is not None and r.expect.outcome is Outcome.LOUD


def groups(chosen: Iterable[Replay], *, separate: bool = False) -> tuple[Group, ...]:
    """CHOSEN's cases grouped by deployment, in first-seen order, the case without a fault first and a loud one last
    (one per group: a second gets its own launch); SEPARATE (the bench's baseline): every case on a launch of its
    own."""
    order: dict[GroupKey, dict[str, tuple[Case, bool, bool]]] = {}
    for r in chosen:
        for control in (True, False):
            s = side(r, control=control)
            loud = _loud(r, control)
            cases = order.setdefault(s.key, {})
            own = separate or _own_launch(r, s.case.fault) or (loud and any(c[2] for c in cases.values()))
            if s.case.name not in cases or own:
                cases[s.case.name] = (s.case, own, loud)
    out = []
    for key, cases in order.items():
        listed = sorted(cases.values(), key=lambda c: (c[0].fault is not None, c[2]))  # no fault first, loud last
        shared = tuple(c for c, own, _ in listed if not own)
        own = tuple(c for c, own, _ in listed if own)
        out.append(Group(key, shared, own))
    return tuple(out)
