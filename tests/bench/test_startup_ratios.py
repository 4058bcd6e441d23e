"""``bench startup``'s target check never reads an unknown ratio as within the target (issue 28, defect 3)."""

from __future__ import annotations

import sys

from kvdoctor.bench import startup


def _result(ratio: float) -> startup.StartupResult:
    def case(name: str, vs_floor: float) -> startup.CaseResult:
        return startup.CaseResult(name, name, 0.2, 0.2, 0.3, vs_floor, [0.2], 10, [], [], [])

    return startup.StartupResult(5, sys.executable, 1.5, [case("floor", 1.0), case("inspect", ratio)])


def test_a_nan_ratio_is_over_the_target_not_within_it() -> None:
    """A floor of 0 CPU seconds makes every ratio NaN (``run_startup_bench``), and ``nan > 1.5`` is False."""
    assert [c.name for c in _result(float("nan")).over_target()] == ["inspect"]
    assert [c.name for c in _result(2.0).over_target()] == ["inspect"]
    assert _result(1.4).over_target() == []
