"""A red configuration made small: delta debugging over its changed flags, and bisection over releases.

:func:`ddmin` is Zeller and Hildebrandt's ddmin ("Simplifying and Isolating Failure-Inducing Input", TSE 2002) over
the flags a red configuration sets away from the server's defaults: it returns a subset that is still red and
1-minimal (setting back any one of its flags turns the run green). Each probe is a real run, so the probes are
cached by the set they test, and the caller's ``red`` says red or not (a flaky cell is repeated before it gets
here). :func:`first_red` bisects an ordered list of releases for the first that is red, assuming what a regression
is (green up to some release, red from it on) and checking both ends, so a range that is red throughout says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from kvdoctor.core.record import record

__all__ = ["Minimized", "ReleaseRange", "ddmin", "first_red"]

T = TypeVar("T")


@record(frozen=True)
class Minimized:
    """The 1-minimal red subset, and every probe run to find it (subset, red), in order."""

    kept: tuple[str, ...]
    probes: tuple[tuple[tuple[str, ...], bool], ...]


def ddmin(changes: Sequence[str], red: Callable[[tuple[str, ...]], bool]) -> Minimized:
    """A 1-minimal subset of CHANGES for which RED holds (RED(CHANGES) is taken as known red)."""
    probes: dict[tuple[str, ...], bool] = {tuple(changes): True}

    def test(subset: Sequence[str]) -> bool:
        key = tuple(c for c in changes if c in subset)
        if key not in probes:
            probes[key] = red(key)
        return probes[key]

    current = list(changes)
    n = 2
    while len(current) >= 2:
        size = len(current) // n
        chunks = [current[i : i + size] for i in range(0, len(current), size)] if size else [[c] for c in current]
        reduced = False
        for chunk in chunks:  # a subset alone still red
            if test(chunk):
                current, n, reduced = chunk, 2, True
                break
        if not reduced:
            for chunk in chunks:  # a complement still red
                rest = [c for c in current if c not in chunk]
                if len(chunks) > 2 and test(rest):
                    current, n, reduced = rest, max(n - 1, 2), True
                    break
        if not reduced:
            if n >= len(current):
                break
            n = min(len(current), 2 * n)
    if len(current) == 1 and test(()):  # red with nothing changed: the defaults are red themselves
        current = []
    return Minimized(tuple(current), tuple(probes.items()))


@record(frozen=True)
class ReleaseRange:
    """Where a red configuration is red among the releases tried (oldest first)."""

    first_red: str | None  # None: green in every release tried
    red_in_oldest: bool  # red from the oldest release tried on (no green release before it)
    tried: tuple[tuple[str, bool], ...]  # (release, red) for every release run

    def says(self, releases: Sequence[str]) -> str:
        if self.first_red is None:
            return f"green in every release tried ({releases[0]}-{releases[-1]})"
        if self.red_in_oldest:
            return f"red in every driven release from {releases[0]}"
        return f"red from {self.first_red} (green in the release before it)"


def first_red(releases: Sequence[str], red: Callable[[str], bool]) -> ReleaseRange:
    """Bisect RELEASES (oldest first; the newest is the one the sweep found red) for the first red one."""
    tried: dict[str, bool] = {}

    def probe(i: int) -> bool:
        if releases[i] not in tried:
            tried[releases[i]] = red(releases[i])
        return tried[releases[i]]

    if not probe(len(releases) - 1):
        return ReleaseRange(None, False, tuple(tried.items()))
    if probe(0):
        return ReleaseRange(releases[0], True, tuple(tried.items()))
    lo, hi = 0, len(releases) - 1  # green at lo, red at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if probe(mid) else (mid, hi)
    return ReleaseRange(releases[hi], False, tuple(tried.items()))
