"""The sweep's orchestration on consistency results as the real run returns them (``tests/sweep/runs.py``): a
planted red where two flags meet is found and minimized to exactly those two, bisected over overlaid releases, cut
cleanly by the budget, split into shards whose merge is the unsharded run, and every report validates against the
shipped schema. The same search on real SGLang servers is ``test_sweep_servers.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdoctor._exceptions import EXIT_GATE, EXIT_PASS, InputError
from kvdoctor.consistency import run as consistency_run
from kvdoctor.report import reportable
from kvdoctor.sweep import run as sweep_run
from kvdoctor.sweep.cell import Verdict
from kvdoctor.sweep.merge import merge
from kvdoctor.sweep.report import Report, body, from_body
from kvdoctor.sweep.run import Sweeper, SweepOptions
from tests.schema_check import assert_valid
from tests.sweep.runs import died, planted, red_unless, result

SPACE = """server = "sglang"

[[factor]]
flag = "--schedule-policy"
values = ["fcfs", "lpm"]
default = "fcfs"

[[factor]]
flag = "--enable-mixed-chunk"
values = [false, true]
default = false

[[factor]]
flag = "--num-continuous-decode-steps"
values = [1, 4]
default = 1
"""
MEET = ("--schedule-policy lpm", "--enable-mixed-chunk")


def _sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rule: object, clock: object = None, **kw: object
) -> Sweeper:
    space = tmp_path / "space.toml"
    space.write_text(kw.pop("space_text", SPACE), encoding="utf-8")  # type: ignore[arg-type]
    monkeypatch.setattr(consistency_run, "run", rule)
    kw.setdefault("overlay_root", tmp_path / "no-overlays")  # not the checkout's .overlay/: what a test bisects over
    o = SweepOptions(
        models=("lfm2-1.2b",), shrink=True, scenarios=("preempt",), space=space, output_dir=tmp_path / "out", **kw
    )  # type: ignore[arg-type]
    s = Sweeper(o) if clock is None else Sweeper(o, clock=clock)  # type: ignore[arg-type]
    s.check(environment=False)
    return s


def test_a_red_where_two_flags_meet_is_found_and_minimized_to_exactly_them(tmp_path, monkeypatch) -> None:
    rule, asked = planted(*MEET)
    r = _sweep(tmp_path, monkeypatch, rule, repeats=1).run()
    reds = [c for c in r.cells if c.verdict is Verdict.RED]
    assert reds and all("--schedule-policy lpm" in c.label and "--enable-mixed-chunk" in c.label for c in reds)
    assert all(c.verdict is Verdict.GREEN for c in r.cells if c not in reds)
    (m, *_) = r.minimized
    assert m.kept == ("--schedule-policy", "--enable-mixed-chunk") and m.words == (
        "red because of --schedule-policy lpm --enable-mixed-chunk"
    )
    assert m.runs == 2 and m.red == 2 and m.deterministic
    assert "no older release" in m.release_words
    runs = [(p.options.subject_args, p.options.server_path) for p in asked]
    repeated = [x for x in runs if runs.count(x) > 1]
    assert set(repeated) <= {(c.argv, ()) for c in reds}, "a configuration other than a red cell's repeat ran twice"
    assert Report(r).exit_code == EXIT_GATE


def test_a_flake_is_reported_with_its_rate_and_not_minimized(tmp_path, monkeypatch) -> None:
    rule, _ = planted(*MEET)
    reds = {"n": 0}

    def flaky(prepared, notify=None):
        out = rule(prepared)
        if not out.passed:  # the planted red: red on its first run, green on every repeat
            reds["n"] += 1
            return out if reds["n"] == 1 else result(red=False)
        return out

    r = _sweep(tmp_path, monkeypatch, flaky, repeats=2).run()
    (m, *_) = r.minimized
    assert (m.runs, m.red, m.kept, m.deterministic) == (3, 1, None, False)
    assert m.words == "flaky: red in 1 of 3 runs; not minimized (ddmin needs a deterministic red)"


def test_bisection_over_overlaid_releases(tmp_path, monkeypatch) -> None:
    root = tmp_path / "overlay"
    for v in ("0.5.20", "0.5.21", "0.5.22"):
        (root / f"sglang-{v}").mkdir(parents=True)
        (root / f"sglang-{v}" / ".installed").write_text("")
    monkeypatch.setattr(sweep_run, "installed_release", lambda server: "0.5.23")
    rule, _ = planted(*MEET, green_in=("0.5.20", "0.5.21"))
    r = _sweep(tmp_path, monkeypatch, rule, overlay_root=root).run()
    (m, *_) = r.minimized
    assert r.releases == ("0.5.20", "0.5.21", "0.5.22", "0.5.23")
    assert m.releases is not None and m.releases.first_red == "0.5.22"
    assert m.release_words == "red from 0.5.22 (green in the release before it)"
    everywhere, _ = planted(*MEET)
    r2 = _sweep(tmp_path, monkeypatch, everywhere, overlay_root=root).run()
    assert r2.minimized[0].release_words == "red in every driven release from 0.5.20"

    def dies_on_0520(prepared, notify=None):
        if any(p.endswith("0.5.20") for p in prepared.options.server_path):
            return died(served=False)
        return everywhere(prepared)

    r3 = _sweep(tmp_path, monkeypatch, dies_on_0520, overlay_root=root).run()
    assert r3.minimized[0].release_words.startswith("bisection stopped: 0.5.20 was refused: pressured: exited")
    with pytest.raises(InputError, match=r"make sglang-overlay VERSION=0\.5\.19"):
        _sweep(tmp_path, monkeypatch, everywhere, overlay_root=root, releases=("0.5.19",))


def test_the_budget_stops_cleanly_and_says_the_coverage_reached(tmp_path, monkeypatch) -> None:
    rule, asked = planted("--never")
    ticks = iter(range(0, 10_000, 10))
    r = _sweep(tmp_path, monkeypatch, rule, clock=lambda: float(next(ticks)), budget_s=100).run()
    ran = [c for c in r.cells if c.verdict is Verdict.GREEN]
    cut = [c for c in r.cells if c.verdict is Verdict.NOT_RUN]
    assert ran and cut and len(asked) == len(ran)
    assert r.stopped_by_budget and r.coverage.covered < r.coverage.total
    assert "--budget 100 s spent" in r.warnings[0]
    published = Report(r)
    assert published.exit_code == EXIT_PASS and published.verdict.value == "warn"


def test_two_shards_merged_are_exactly_the_unsharded_run(tmp_path, monkeypatch) -> None:
    rule, _ = planted(*MEET)
    whole = _sweep(tmp_path, monkeypatch, rule, minimize=False).run()
    shards = [_sweep(tmp_path, monkeypatch, rule, minimize=False, shard=f"{i}/2").run() for i in (1, 2)]
    assert {c.key for c in shards[0].cells}.isdisjoint({c.key for c in shards[1].cells})
    docs = [(Path(f"s{i}.json"), reportable.json_document(Report(s))) for i, s in enumerate(shards)]
    merged = merge(docs)
    assert [(c.key, c.verdict) for c in merged.cells] == [(c.key, c.verdict) for c in whole.cells]
    assert merged.coverage == whole.coverage and not merged.warnings
    assert_valid(reportable.json_document(Report(merged)), "sweep")
    with pytest.raises(InputError, match="also in"):
        merge([docs[0], docs[0]])
    with pytest.raises(InputError, match="two reports or more"):
        merge(docs[:1])
    partial = merge([docs[0], (Path("x.json"), reportable.json_document(Report(shards[0])) | {"cells": []})])
    assert "in no report" in partial.warnings[-1]


def test_the_report_validates_and_reads_back_as_the_result(tmp_path, monkeypatch) -> None:
    rule, _ = planted(*MEET)
    r = _sweep(tmp_path, monkeypatch, rule).run()
    doc = assert_valid(reportable.json_document(Report(r)), "sweep")
    assert doc["counts"]["red"] == r.count(Verdict.RED) and doc["minimized"][0]["kept"] == [
        "--schedule-policy",
        "--enable-mixed-chunk",
    ]
    assert from_body(body(r)) == r


def test_a_value_kvdoctor_refuses_everywhere_leaves_the_plan_listed_with_its_reason(tmp_path, monkeypatch) -> None:
    owned = SPACE + '\n[[factor]]\nflag = "--schedule-conservativeness"\nvalues = [0.05, 1.0]\ndefault = 1.0\n'
    rule, asked = planted(*MEET)
    s = _sweep(tmp_path, monkeypatch, rule, space_text=owned, minimize=False)
    assert [x.what for x in s.refused] == ["--schedule-conservativeness 0.05"]
    assert "not allowed" in s.refused[0].reason
    assert all(f.flag != "--schedule-conservativeness" for f in s.space.factors)
    r = s.run()
    assert all("--schedule-conservativeness" not in " ".join(p.options.subject_args) for p in asked)
    assert r.refused == tuple(s.refused)


OVERLAP = """server = "sglang"

[[factor]]
flag = "--disable-overlap-schedule"
values = [false, true]
default = false

[[factor]]
flag = "--schedule-policy"
values = ["fcfs", "lpm"]
default = "fcfs"

[[factor]]
flag = "--enable-mixed-chunk"
values = [false, true]
default = false
"""


def test_red_defaults_are_minimized_against_the_nearest_green_cell(tmp_path, monkeypatch) -> None:
    """The overlap finding's shape: the server's defaults red, green with one flag set. ddmin starts from the
    nearest green configuration and keeps that flag's red value; every later red cell holding it is said to."""
    rule, _ = red_unless("--disable-overlap-schedule")
    r = _sweep(tmp_path, monkeypatch, rule, space_text=OVERLAP).run()
    first, *rest = r.minimized
    assert first.index == 0 and first.kept == ("--disable-overlap-schedule",) and first.baseline is not None
    assert first.words == ("red because of --disable-overlap-schedule left out (green with --disable-overlap-schedule)")
    assert rest and all(m.kept is None and "not minimized again" in m.note for m in rest)
    assert all(f"configuration {first.index} was minimized to" in m.note for m in rest)


def test_red_everywhere_has_nothing_to_minimize_against(tmp_path, monkeypatch) -> None:
    rule, _ = planted()  # every configuration red
    r = _sweep(tmp_path, monkeypatch, rule, repeats=0).run()
    assert all(c.verdict is Verdict.RED for c in r.cells)
    assert r.minimized[0].words == "red in every configuration tried: no green configuration to minimize against"


def test_the_budget_cuts_minimization_before_its_next_run(tmp_path, monkeypatch) -> None:
    rule, asked = planted(*MEET)
    now = {"t": 0.0}

    def timed(prepared, notify=None):
        now["t"] += 10  # every run costs 10 s of the sweep's clock
        return rule(prepared)

    planner = _sweep(tmp_path, monkeypatch, timed)
    whole = planner.plan()
    shard = "2/2"  # without the defaults' cell: a baseline run would be the first run the minimizer makes
    mine = [i for i, _ in sweep_run.covering.shard(whole, shard)]
    assert 0 not in mine and any(all(w in whole[i].label(planner.space) for w in MEET) for i in mine)
    budget = 10 * len(mine) - 5  # every cell starts inside it; nothing after them does
    s = _sweep(tmp_path, monkeypatch, timed, clock=lambda: now["t"], shard=shard, budget_s=budget)
    before = len(asked)
    r = s.run()
    assert len(asked) - before == len(mine), "a run started after the --budget was spent"
    assert all(c.verdict is not Verdict.NOT_RUN for c in r.cells)
    assert r.minimized and all(m.words == "the --budget was spent while minimizing" for m in r.minimized)


PAGED = """server = "sglang"

[[factor]]
flag = "--page-size"
values = [1, 16]
default = 1

[[factor]]
flag = "--disable-radix-cache"
values = [false, true]
default = false
"""


def test_a_configuration_the_server_refuses_at_start_up_is_refused_before_it_launches(tmp_path, monkeypatch) -> None:
    """LFM2 with pages of 16 and its radix cache on: SGLang resolves no_buffer and refuses (kvdoctor's rule model,
    citing SGLang's validate_mamba_no_buffer); no run is asked for it. With the radix cache off it runs."""
    rule, asked = planted("--never")
    r = _sweep(tmp_path, monkeypatch, rule, space_text=PAGED, strength=2).run()
    cells = {c.label: c for c in r.cells}
    refused = cells["--page-size 16"]
    assert refused.verdict is Verdict.REFUSED
    assert refused.reason.startswith("pressured: SGLang refuses it at start-up: no_buffer only supports page_size=1.")
    assert "sglang/srt/arg_groups/mamba_hook.py:" in refused.reason and "kvdoctor's rule model" in refused.reason
    ran = [" ".join(p.options.subject_args) for p in asked]
    assert "--page-size 16" not in ran and "--page-size 16 --disable-radix-cache" in ran
    assert cells["--page-size 16 --disable-radix-cache"].verdict is Verdict.GREEN
