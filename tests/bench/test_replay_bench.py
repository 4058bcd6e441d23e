"""``kvdoctor bench replay``: the matrix beside one launch per case, from one run (fake runner): the ratio, the
launches, the target; a layout that changes a verdict is never a green bench."""

from __future__ import annotations

from kvdoctor.bench.replay import TARGET_S, measure
from kvdoctor.core import replays
from kvdoctor.replay.run import Settings, prepare, run
from tests.replay import fakes
from tests.replay.test_run import _answer


def _matrices(answer=_answer):
    chosen = tuple(r for r in replays.replays() if not r.in_process)
    runner = fakes.FakeRunner(answer)
    grouped = run(prepare(chosen, Settings(), runner), runner)
    alone = run(prepare(chosen, Settings(), runner, separate=True), runner)
    return grouped, alone


def test_the_matrix_uses_fewer_launches_and_the_ratio_is_the_two_walls() -> None:
    grouped, alone = _matrices()
    bench = measure(grouped, alone, cpus=2)
    assert bench.exit_code == 0 and not bench.warnings
    assert bench.matrix.launches < bench.separate.launches
    assert bench.separate.launches == sum(len(g.cases) for g in alone.groups)
    assert bench.ratio == round(alone.wall_s / grouped.wall_s, 4)
    assert bench.vs_target == round(grouped.wall_s / TARGET_S, 4)


def test_layouts_that_disagree_on_a_verdict_are_never_a_green_bench() -> None:
    grouped, _ = _matrices()
    calls = {"n": 0}

    def flaky(options: object, case: object) -> object:  # the same fault green when it runs alone
        calls["n"] += 1
        return fakes.green("transfer") if getattr(case, "fault", None) == "drop-pd-state" else _answer(options, case)

    _, alone = _matrices(flaky)
    bench = measure(grouped, alone, cpus=2)
    assert bench.exit_code == 1 and any("sglang#23773" in w for w in bench.warnings)
