"""``kvdoctor bench replay``: what running many cases per deployment saves, measured against itself in one run.

The same bugs are replayed twice, back to back on the same machine: first as ``kvdoctor replay`` runs them (the
matrix: cases sharing a deployment run on one launch, each fault armed at run time), then with every case on a
launch of its own (one launch per fault, and per control). The bench reports both wall times and launches side by
side, the ratio of the second to the first, and the matrix against issue 30's target: ``kvdoctor replay --all`` in
under 20 minutes on 2 cores. Both layouts must reach the same verdict per bug (a layout that changes a verdict is a
bug of the matrix: reported as a warning and never a green bench); a bench over a matrix that did not reproduce
every bug exits as the replay would (1, or 3 for a deployment that failed), its numbers still shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvdoctor._exceptions import EXIT_GATE, EXIT_PASS
from kvdoctor.bench import report as bench_report
from kvdoctor.replay.report import exit_code
from kvdoctor.replay.run import Matrix

__all__ = ["TARGET_CPUS", "TARGET_S", "BenchReport", "ReplayBench", "measure"]

TARGET_S = 1200.0  # issue 30: kvdoctor replay --all in under 20 minutes ...
TARGET_CPUS = 2  # ... on 2 cores


@dataclass(frozen=True)
class Layout:
    """One way of running the same bugs: its wall time, launches and verdicts."""

    name: str  # matrix or one-launch-per-case
    wall_s: float
    launches: int
    reproduced: int
    statuses: dict[str, str]  # bug -> its status


@dataclass(frozen=True)
class ReplayBench:
    bugs: list[str]
    cpus: int
    target_s: float
    target_cpus: int
    matrix: Layout
    separate: Layout
    ratio: float  # separate wall / matrix wall: how many times longer one launch per case takes
    vs_target: float  # matrix wall / TARGET_S
    exit_code: int
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)

    def detail(self) -> str:
        m, s = self.matrix, self.separate
        return (
            f"matrix {m.wall_s:,.0f} s on {m.launches} launches, one launch per case {s.wall_s:,.0f} s on "
            f"{s.launches}: {self.ratio:.2f}x; matrix {self.vs_target:.2f}x the {TARGET_S / 60:.0f}-minute target; "
            f"{m.reproduced}/{len(self.bugs)} bugs reproduced"
        )


def _layout(name: str, m: Matrix) -> Layout:
    statuses = {v.replay.bug: v.status for v in m.verdicts}
    return Layout(name, round(m.wall_s, 3), m.launches, sum(v.reproduced for v in m.verdicts), statuses)


def measure(matrix: Matrix, separate: Matrix, cpus: int) -> ReplayBench:
    """The bench of the two layouts of one run."""
    a, b = _layout("matrix", matrix), _layout("one-launch-per-case", separate)
    warnings = [
        f"{bug}: {a.statuses[bug]} in the matrix, {b.statuses.get(bug)} on launches of its own"
        for bug in a.statuses
        if a.statuses[bug] != b.statuses.get(bug)
    ]
    if a.wall_s > TARGET_S:
        warnings.append(f"the matrix took {a.wall_s:.0f} s, over issue 30's {TARGET_S:.0f} s target")
    code = exit_code(matrix.verdicts)
    if code == EXIT_PASS and warnings and any(a.statuses[bug] != b.statuses.get(bug) for bug in a.statuses):
        code = EXIT_GATE  # the layouts disagree: the matrix cannot be trusted green
    return ReplayBench(
        bugs=list(a.statuses),
        cpus=cpus,
        target_s=TARGET_S,
        target_cpus=TARGET_CPUS,
        matrix=a,
        separate=b,
        ratio=round(separate.wall_s / matrix.wall_s, 4) if matrix.wall_s > 0 else 0.0,  # unrounded: a ratio of
        vs_target=round(matrix.wall_s / TARGET_S, 4),  # two rounded walls would move in its third digit
        exit_code=code,
        warnings=warnings,
    )


@dataclass(frozen=True)
class BenchReport(bench_report.BenchReport):
    """``kvdoctor bench replay`` as the status line reads it."""

    bench: ReplayBench
    command = "bench replay"
    suite = "kvdoctor bench replay"
    title = "kvdoctor bench replay"
