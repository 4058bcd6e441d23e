"""``kvdoctor sweep`` from the command line: the plan without a run (its JSON valid against the schema), bad input
refused in one line (exit 2) before anything starts, and ``sweep merge`` joining shards' reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvdoctor.report import reportable
from kvdoctor.sweep.report import Report
from tests.schema_check import assert_valid
from tests.sweep.runs import planted
from tests.sweep.test_sweeper import MEET, SPACE, _sweep


def kvdoctor(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvdoctor", "sweep", *args], capture_output=True, text=True, check=False, cwd=cwd
    )


def test_the_plan_runs_nothing_and_its_json_is_the_schemas() -> None:
    done = kvdoctor("lfm2-1.2b", "--shrink", "--plan", "--json")
    assert done.returncode == 0, done.stderr
    doc = assert_valid(done.stdout, "sweep")
    assert doc["scenarios"] == ["preempt", "prefix-cache"] and doc["plan"]["configurations"][0]["label"] == "defaults"
    assert [x["what"] for x in doc["refused"]] == ["--scenario transfer"]
    flags = [f["flag"] for f in doc["space"]["factors"]]
    assert "--disaggregation-decode-retraction-backup" not in flags  # a PD-only flag: not in a single server's space
    pd = json.loads(kvdoctor("lfm2-1.2b", "--shrink", "--plan", "--json", "--topology", "pd").stdout)
    assert "--disaggregation-decode-retraction-backup" in [f["flag"] for f in pd["space"]["factors"]]
    assert pd["scenarios"] == ["preempt", "transfer"]
    share = json.loads(kvdoctor("lfm2-1.2b", "--shrink", "--plan", "--json", "--shard", "2/3").stdout)
    assert [c["index"] for c in share["plan"]["configurations"]] == list(
        range(1, len(doc["plan"]["configurations"]), 3)
    )
    text = kvdoctor("lfm2-1.2b", "--shrink", "--plan")
    assert text.returncode == 0 and "plan: 16 configurations × 2 scenarios × 1 models" in text.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--budget", "soon"], "--budget soon: a duration"),
        (["--budget", "-5m"], "--budget -5m: must be a finite duration > 0"),
        (["--shard", "3/2"], "--shard 3/2: I/N with 1 <= I <= N"),
        (["--strength", "0"], "--strength 0: at least 1"),
        (["--space", "/nonexistent/space.toml"], "--space /nonexistent/space.toml: No such file"),
        (["--server", "vllm", "--topology", "pd"], "--server vllm runs --topology single only"),
        (["--scenario", "transfer"], "--scenario transfer needs --topology pd"),
        (["--plan", "--junit", "x.xml"], "--plan runs nothing"),
        (["--repeat", "-1"], "--repeat must be >= 0"),
        (["--release", "0.5.1"], "--release 0.5.1: no .overlay/sglang-0.5.1/"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], words: str, tmp_path: Path) -> None:
    done = kvdoctor("lfm2-1.2b", "--shrink", "--plan", *args) if "--plan" not in args else kvdoctor("lfm2-1.2b", *args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert words in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr and not done.stdout


def test_vllms_built_in_space_is_its_parsers_and_lists_what_kvdoctor_owns() -> None:
    done = kvdoctor("llama-3.1-8b", "--shrink", "--server", "vllm", "--plan", "--json")
    doc = assert_valid(done.stdout, "sweep")
    factors = {f["flag"]: f for f in doc["space"]["factors"]}
    assert factors["--async-scheduling"]["default"] is None and factors["--mamba-ssm-cache-dtype"]["default"] == "auto"
    assert "--max-num-seqs" not in factors and {x["what"] for x in doc["refused"]} >= {"--max-num-seqs 4"}
    words = {w for c in doc["plan"]["configurations"] for w in c["argv"]}
    assert {"--async-scheduling", "--no-async-scheduling"} <= words  # on, off, and left out (vLLM decides)


def test_a_space_file_with_a_flag_the_server_does_not_take_is_refused(tmp_path: Path) -> None:
    space = tmp_path / "space.toml"
    space.write_text(SPACE.replace("--enable-mixed-chunk", "--enable-mixed-chunks"), encoding="utf-8")
    done = kvdoctor("lfm2-1.2b", "--shrink", "--plan", "--space", str(space))
    assert done.returncode == 2 and "--enable-mixed-chunks is not a sglang server flag" in done.stderr


def test_a_run_without_the_server_environment_is_refused_before_anything_starts(tmp_path: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("SGLang's server is installed here")
    done = kvdoctor("lfm2-1.2b", "--shrink", "--output-dir", str(tmp_path / "out"))
    assert done.returncode == 2 and "make server-env" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


def test_merge_joins_shards_and_refuses_what_is_no_shard_of_the_same_sweep(tmp_path, monkeypatch) -> None:
    rule, _ = planted(*MEET)
    paths = []
    for i in (1, 2):
        shard = _sweep(tmp_path, monkeypatch, rule, minimize=False, shard=f"{i}/2").run()
        path = tmp_path / f"shard-{i}.json"
        path.write_text(json.dumps(reportable.json_document(Report(shard))), encoding="utf-8")
        paths.append(str(path))
    html, junit = tmp_path / "sweep.html", tmp_path / "sweep.xml"
    done = kvdoctor("merge", *paths, "--json", "--html", str(html), "--junit", str(junit))
    assert done.returncode == 1, done.stderr  # the planted red
    doc = assert_valid(done.stdout, "sweep")
    assert [s["shard"] for s in doc["shards"]] == ["1/2", "2/2"] and doc["plan"]["shard"] is None
    assert len(doc["cells"]) == len(doc["plan"]["configurations"]) and html.is_file() and junit.is_file()
    alone = kvdoctor("merge", paths[0])
    assert alone.returncode == 2 and "two reports or more" in alone.stderr
    other = tmp_path / "other.json"
    changed = json.loads(Path(paths[1]).read_text()) | {"strength": 3}
    other.write_text(json.dumps(changed), encoding="utf-8")
    mismatch = kvdoctor("merge", paths[0], str(other))
    assert mismatch.returncode == 2 and "its strength differs" in mismatch.stderr
    junk = tmp_path / "junk.json"
    junk.write_text("{", encoding="utf-8")
    assert "not a JSON report" in kvdoctor("merge", paths[0], str(junk)).stderr
    cut = tmp_path / "cut.json"
    partial = json.loads(Path(paths[1]).read_text())
    del partial["space"]
    cut.write_text(json.dumps(partial), encoding="utf-8")
    torn = kvdoctor("merge", paths[0], str(cut))
    assert torn.returncode == 2, torn.stderr
    assert f"{cut}: not a whole kvdoctor sweep --json report (KeyError: 'space')" in torn.stderr
    assert "Traceback" not in torn.stderr
    bad_cell = json.loads(Path(paths[1]).read_text())
    bad_cell["cells"][0]["verdict"] = "purple"
    cut.write_text(json.dumps(bad_cell), encoding="utf-8")
    torn = kvdoctor("merge", paths[0], str(cut))
    assert torn.returncode == 2 and "not a whole kvdoctor sweep --json report (ValueError" in torn.stderr, torn.stderr
