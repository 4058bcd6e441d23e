"""What a sweep found: its cells, each red one made small, and how long each part took (one typed result, the JSON
through :mod:`kvdoctor.sweep.report`)."""

from __future__ import annotations

from typing import Any

from kvdoctor.core.record import record
from kvdoctor.sweep.cell import Verdict
from kvdoctor.sweep.covering import Coverage
from kvdoctor.sweep.minimize import ReleaseRange
from kvdoctor.sweep.space import Configuration, Space, Value

__all__ = ["Cell", "Minimized", "Refusal", "SweepResult"]


@record(frozen=True)
class Refusal:
    """A value (or a scenario) the sweep could not run anywhere, and why: kvdoctor's refusal, citing the server."""

    what: str  # "--page-size 64", or "--scenario offload"
    reason: str


class _Placed:
    """Where a cell (or the red minimized from it) sits in the matrix: its model, scenario and configuration."""

    model: str
    scenario: str
    index: int

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.model, self.scenario, self.index)

    @property
    def column(self) -> tuple[str, str]:
        """The model and scenario: the matrix's column, whose cells a minimizer compares with each other."""
        return (self.model, self.scenario)


@record(frozen=True)
class Cell(_Placed):
    """One model × scenario × configuration, run (or not) and judged (:func:`kvdoctor.sweep.cell.classify`)."""

    model: str
    scenario: str
    index: int  # the configuration's index in the plan
    label: str  # its changed flags, or "defaults"
    argv: tuple[str, ...]  # the subject's flags
    verdict: Verdict
    reason: str
    summary: str = ""  # the consistency run's own summary line
    identical: int | None = None
    total: int | None = None
    retractions: int | None = None  # the pressured server's count (preemptions under vLLM)
    first_divergence: dict[str, Any] | None = None  # request, position, by (token or logprobs)
    fault_fired: bool | None = None  # --inject / --fault-file: did it fire in this cell (None: no fault)
    run_dir: str | None = None
    bundle: str | None = None
    wall_s: float = 0.0


@record(frozen=True)
class Minimized(_Placed):
    """A red cell made small: how often it is red, the 1-minimal flags it is red because of, and since when."""

    model: str
    scenario: str
    index: int
    runs: int  # the cell's runs (the first and its repeats)
    red: int  # how many of them were red
    kept: tuple[str, ...] | None  # the 1-minimal flags (None: not minimized, ``note`` says why)
    argv: tuple[str, ...]  # the minimized configuration's subject flags
    probes: tuple[tuple[tuple[str, ...], str], ...]  # (flags set, verdict) per ddmin probe, in order
    releases: ReleaseRange | None  # None: not bisected (``note`` says why)
    release_words: str  # the range in words ("red in every driven release from 0.5.20")
    bundle: str | None  # the minimized red run's reproduction bundle
    note: str = ""
    wall_s: float = 0.0
    baseline: int | None = None  # the green configuration ddmin started from (None: the server's defaults)
    cause: str = ""  # the kept flags with the red values, and the green ones (from a baseline other than defaults)

    @property
    def deterministic(self) -> bool:
        return self.red == self.runs

    @property
    def rate(self) -> float:
        return self.red / self.runs if self.runs else 0.0

    @property
    def words(self) -> str:
        """``red because of --X --Y``, or what the minimizer could say."""
        if self.kept is None:
            return self.note
        if not self.kept:
            return "red with the server's defaults (no flag needed)"
        return f"red because of {self.cause or ' '.join(self.argv)}"


@record(frozen=True)
class SweepResult:
    server: str
    topology: str
    models: tuple[str, ...]
    scenarios: tuple[str, ...]
    space: Space
    strength: int
    plan: tuple[Configuration, ...]  # the whole plan (every shard's)
    shard: str | None  # "I/N" when this run is one share of the plan
    cells: tuple[Cell, ...]
    refused: tuple[Refusal, ...]
    coverage: Coverage  # the t-tuples the cells that ran met
    minimized: tuple[Minimized, ...]
    timings: dict[str, float]  # plan_s, cells_s, minimize_s, wall_s
    budget_s: float | None = None
    stopped_by_budget: bool = False
    inject: str | None = None
    fault_file: str | None = None
    output_dir: str = ""
    releases: tuple[str, ...] = ()  # the releases bisection could run, oldest first (the installed one last)
    warnings: tuple[str, ...] = ()
    shards: tuple[tuple[str, str | None], ...] = ()  # kvdoctor sweep merge: (report path, its shard) per report

    def count(self, verdict: Verdict) -> int:
        return sum(c.verdict is verdict for c in self.cells)

    def minimized_for(self, cell: Cell) -> Minimized | None:
        return next((m for m in self.minimized if m.key == cell.key), None)

    def value_of(self, index: int, flag: str) -> Value:
        return self.plan[index].get(flag)
