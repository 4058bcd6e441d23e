"""The plan of a sweep: a t-wise covering array over a space's factors, and the coverage a set of cells reached.

Every t flags' values (pairs by default) meet in at least one configuration, so a bug that needs two flags set a
certain way is in some cell, in far fewer cells than the full product (a dozen for ten two- and three-valued flags,
against thousands). The array is built by ``covertable`` (Apache-2.0, pure Python; README, "Libraries"), seeded with
the server's defaults as the first row so the plan always holds the bare launch line. Its order is deterministic:
the same space and strength give the same plan, so shards of one plan (:func:`shard`) are disjoint and whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import combinations, product

from covertable import make

from kvdoctor._exceptions import InputError
from kvdoctor.core.record import record
from kvdoctor.sweep.space import Configuration, Space

__all__ = ["Coverage", "coverage", "plan", "shard"]


def plan(space: Space, strength: int = 2) -> tuple[Configuration, ...]:
    """The configurations that cover every STRENGTH-tuple of SPACE's values, the defaults first."""
    if strength < 1:
        raise InputError(f"--strength {strength}: at least 1 (1: every value once; 2: every pair of values)")
    factors = space.factors
    if not factors:
        return (space.defaults(),)
    indices = {f.flag: list(range(len(f.values) + (f.default not in f.values))) for f in factors}
    values = {f.flag: (*f.values, *(() if f.default in f.values else (f.default,))) for f in factors}
    default_row = {f.flag: values[f.flag].index(f.default) for f in factors}
    t = min(strength, len(factors))
    if t == len(factors):
        rows = [dict(zip(indices, combo, strict=True)) for combo in product(*indices.values())]
        rows.sort(key=lambda r: r != default_row)  # the defaults first, then the product's order
    else:
        rows = make(indices, strength=t, presets=[default_row])
    chosen = [{flag: values[flag][i] for flag, i in row.items()} for row in rows]
    return tuple(dict.fromkeys(space.configuration(row) for row in chosen))


@record(frozen=True)
class Coverage:
    """How many of the space's t-tuples of values the cells met, of how many."""

    strength: int
    covered: int
    total: int

    @property
    def fraction(self) -> float:
        return self.covered / self.total if self.total else 1.0


def _tuples(space: Space, t: int) -> set[tuple[tuple[str, object], ...]]:
    every: set[tuple[tuple[str, object], ...]] = set()
    for group in combinations(space.factors, t):
        choices = [[(f.flag, v) for v in dict.fromkeys((*f.values, f.default))] for f in group]
        every.update(product(*choices))
    return every


def coverage(space: Space, cells: Iterable[Configuration], strength: int = 2) -> Coverage:
    """The STRENGTH-tuples of SPACE's values that CELLS meet (what a ``--budget`` run reached)."""
    t = min(strength, len(space.factors))
    every = _tuples(space, t)
    met: set[tuple[tuple[str, object], ...]] = set()
    for cell in cells:
        pairs = [(f.flag, cell.get(f.flag)) for f in space.factors]
        met.update(combo for combo in combinations(pairs, t))
    return Coverage(strength, len(every & met), len(every))


def shard(cells: Sequence[Configuration], spec: str) -> tuple[tuple[int, Configuration], ...]:
    """The share ``--shard I/N`` runs of CELLS: every N-th cell from the I-th (1-based), with its plan index."""
    index, slash, count = spec.partition("/")
    if not (slash and index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
        raise InputError(f"--shard {spec}: I/N with 1 <= I <= N, such as 1/4")
    i, n = int(index), int(count)
    return tuple((k, cell) for k, cell in enumerate(cells) if k % n == i - 1)
