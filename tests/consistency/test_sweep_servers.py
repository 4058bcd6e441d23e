"""``kvdoctor sweep`` on real SGLang 0.5.23 servers (``make test-server``, in .venv-server/; minutes): told nothing but
a fault file, the sweep finds where it shows and minimizes the red cell to exactly the two flags where it fires.

The planted fault (``tests/sweep/faults/swap_where_flags_meet.py``) swaps two live requests' recurrent state only in
a server that runs both ``--schedule-policy lpm`` and ``--enable-mixed-chunk``. A two-configuration sweep (strength
1 over those two flags: the defaults, then both set) on a shrunk LFM2, one server pair per run: the defaults green
with retraction proven, both flags red, and ddmin's probes (each flag alone: green, the fault never fires) leave
both; the red is then bisected over the release overlays present (CI: 0.5.22). Five runs, about 7 minutes. The
JSON validates against the schema, JUnit has a case per cell, and the page is written.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.schema_check import assert_valid

pytestmark = pytest.mark.server

FAULT = Path(__file__).parents[1] / "sweep" / "faults" / "swap_where_flags_meet.py"
SPACE = """server = "sglang"

[[factor]]
flag = "--schedule-policy"
values = ["fcfs", "lpm"]
default = "fcfs"
why = "which waiting request runs next"

[[factor]]
flag = "--enable-mixed-chunk"
values = [false, true]
default = false
why = "prefill chunks mixed into decode batches"
"""
WORKLOAD = ("--requests", "16", "--prompt-tokens", "16", "--max-new-tokens", "32", "--concurrency", "16")
TIMEOUT_S = 900
OLDER = "0.5.22"  # the release bisected over, where it is overlaid


def test_a_fault_where_two_flags_meet_is_found_and_minimized_to_them(tmp_path: Path) -> None:
    space = tmp_path / "space.toml"
    space.write_text(SPACE, encoding="utf-8")
    html, junit = tmp_path / "sweep.html", tmp_path / "sweep.xml"
    kvdoctor = Path(sys.executable).with_name("kvdoctor")
    argv = [str(kvdoctor), "sweep", "lfm2-1.2b", "--shrink", "--space", str(space), "--strength", "1"]
    argv += ["--scenario", "preempt", "--fault-file", str(FAULT), "--repeat", "0", *WORKLOAD]
    argv += ["--timeout", str(TIMEOUT_S), "--output-dir", str(tmp_path / "out"), "--json"]
    argv += ["--html", str(html), "--junit", str(junit)]
    overlay = Path(".overlay") / f"sglang-{OLDER}" / ".installed"  # CI's (make test-sglang-overlay VERSION=0.5.22)
    argv += ["--release", OLDER] if overlay.is_file() else []
    done = subprocess.run(argv, capture_output=True, text=True, timeout=6 * TIMEOUT_S, check=False)
    sys.stderr.write(done.stderr[-6000:])
    assert done.stdout, done.stderr[-2000:]
    doc = assert_valid(done.stdout, "sweep")
    assert done.returncode == 1, doc.get("counts")
    cells = {c["label"]: c for c in doc["cells"]}
    assert set(cells) == {"defaults", "--schedule-policy lpm --enable-mixed-chunk"}
    green, red = cells["defaults"], cells["--schedule-policy lpm --enable-mixed-chunk"]
    assert green["verdict"] == "green" and green["retractions"] >= 1 and green["fault_fired"] is False, green
    assert red["verdict"] == "red" and red["fault_fired"] is True, red
    (m,) = doc["minimized"]
    assert m["kept"] == ["--schedule-policy", "--enable-mixed-chunk"], m
    assert [p["verdict"] for p in m["probes"] if len(p["flags"]) == 1] == ["green", "green"], m["probes"]
    if overlay.is_file():  # the planted fault's hook is there in 0.5.22 too: red in every release driven
        assert doc["releases"][0] == OLDER and m["release_words"] == f"red in every driven release from {OLDER}", m
    else:
        assert m["release_words"].startswith("only "), m
    assert doc["timings"]["cells_s"] > 0 and doc["timings"]["minimize_s"] > 0
    assert html.read_text(encoding="utf-8").count('data-verdict="red"') >= 2
    assert junit.read_text(encoding="utf-8").count("<testcase") == 2
    json.loads(done.stdout)
