"""``kvdoctor bench consistency`` on real SGLang 0.5.23 servers (in .venv-server/; minutes): marked ``matrix``,
never among CI's few. One PD run of the shrunk Llama at the command's default workload; the bench's report
must agree with the consistency result the same run wrote beside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.server, pytest.mark.matrix]

TIMEOUT_S = 1200
PHASES = [
    "prepare",
    "start-up",
    "warm-up",
    "reference",
    "reference-repeat",
    "pressured",
    "compare",
    "teardown",
    "trace",
]


def test_the_bench_of_a_real_pd_run_agrees_with_the_runs_own_result(tmp_path: Path) -> None:
    kvdoctor = Path(sys.executable).with_name("kvdoctor")
    out = Path(os.environ.get("KVDOCTOR_CONSISTENCY_OUT", str(tmp_path)))
    argv = [str(kvdoctor), "bench", "consistency", "llama-3.1-8b", "--shrink", "--topology", "pd", "--json"]
    done = subprocess.run(
        [*argv, "--output-dir", str(out), "--timeout", str(TIMEOUT_S)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S + 120,
        check=False,
    )
    sys.stderr.write(done.stderr[-4000:])
    assert done.returncode == 0, done.stderr[-2000:]
    bench = json.loads(done.stdout)
    run_dir = Path(bench["run_dir"])
    assert json.loads((run_dir / "bench.json").read_text()) == bench
    result = json.loads((run_dir / "result.json").read_text())
    assert result["exit_code"] == bench["consistency"]["exit_code"] == 0

    # token counts and retractions: the consistency result's own
    assert [(b["name"], b["output_tokens"]) for b in bench["bursts"]] == [
        (b["name"], b["output_tokens"]) for b in result["bursts"]
    ]
    assert all(b["output_tokens"] > 0 for b in bench["bursts"])
    w = result["workload"]
    assert all(b["output_tokens"] <= w["requests"] * w["max_new_tokens"] for b in bench["bursts"])
    assert bench["retractions"] == result["retractions"] and bench["retractions"]["pressured"] > 0
    assert [b["retractions"] for b in bench["bursts"]] == [0, 0, result["retractions"]["pressured"]]
    # one tok/s, from the run's clock
    for b, r in zip(bench["bursts"], result["bursts"], strict=True):
        assert b["wall_s"] > 0 and abs(b["wall_s"] - r["wall_s"]) <= 0.01
        assert b["tokens_per_s"] == pytest.approx(b["output_tokens"] / b["wall_s"], abs=0.01)

    # every server of the plan, each ready inside the start-up phase
    roles = [s["role"] for s in result["deployment"]["steps"]]
    assert [s["role"] for s in bench["servers"]] == roles == list(result["launch_s"])
    phases = {p["name"]: p for p in bench["phases"]}
    assert list(phases) == PHASES
    startup = phases["start-up"]
    for s in bench["servers"]:
        assert s["seconds"] > 0 and startup["start_s"] <= s["launched_s"] < s["ready_s"]
        assert s["ready_s"] <= startup["start_s"] + startup["seconds"] + 0.01
    assert bench["startup_s"] == startup["seconds"] >= max(s["seconds"] for s in bench["servers"]) - 0.01

    # the phases follow each other, every one positive, and sum within the total
    total = bench["total_s"]
    assert total == pytest.approx(result["wall_s"], abs=0.01)
    ends = 0.0
    for p in bench["phases"]:
        assert p["seconds"] >= 0 and p["start_s"] >= ends - 0.002
        ends = p["start_s"] + p["seconds"]
    assert ends <= total + 0.002
    assert bench["untimed_s"] >= 0 and bench["timed_s"] + bench["untimed_s"] == pytest.approx(total, abs=0.01)
    assert all(phases[name]["seconds"] > 0 for name in ("start-up", "reference", "reference-repeat", "pressured"))
    # the ratios are the numbers above, divided
    ratios = bench["ratios"]
    ref, repeat, pressured = bench["bursts"]
    assert ratios["pressured_vs_reference"] == pytest.approx(pressured["tokens_per_s"] / ref["tokens_per_s"], rel=1e-3)
    assert ratios["repeat_vs_reference"] == pytest.approx(repeat["tokens_per_s"] / ref["tokens_per_s"], rel=1e-3)
    assert ratios["startup_share"] == pytest.approx(startup["seconds"] / total, abs=1e-3)
    assert ratios["vs_target"] == pytest.approx(total / bench["target_s"], abs=1e-3)
    assert (len(bench["warnings"]) == 1) == (total > bench["target_s"])
