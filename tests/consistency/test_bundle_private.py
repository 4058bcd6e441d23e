"""A bundle is made to be posted publicly (issue 43, defect 16): no file of it carries the user's absolute paths (the
run directory, the output folder, ``--bundle``'s folder, the checkout, the working directory, the home) or the values
of kvdoctor's own ``KVDOCTOR_*`` variables and ``PYTHONPATH``; ``trace/result.json`` once carried them 27 times."""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest

import kvdoctor
from kvdoctor.consistency import attribution, bundle, deploy
from kvdoctor.consistency.prepared import STANDIN_LOG
from kvdoctor.engines.sglang.cpu_shims import SHIM_DIR
from kvdoctor.report import envelope
from tests.consistency.test_bundle import PORTS, PROMPTS, W, _red, _tokens

CHECKOUT = Path(kvdoctor.__file__).resolve().parent.parent


def _realistic(root: Path, home: Path, dest: Path) -> tuple[bundle.Written, deploy.Deployment]:
    """A red PD run as ``kvdoctor consistency`` records it: its deployment's steps (kvdoctor's variables and path in
    their environments, the user's own PYTHONPATH after them), logs, stand-in log, enablers, command line, a trace
    line naming the run directory."""
    r, run_dir = _red(root)
    d = deploy.build(
        deploy.DeployOptions(
            model_dir=r.model_dir or "",
            topology="pd",
            device="cpu",
            workload=W,
            has_recurrent=True,
            stand_in_dir=str(SHIM_DIR),
            site_hook_dir=str(Path(SHIM_DIR).parent / "site_hook"),
            inherited_pythonpath=f"{home}/lib:/opt/elsewhere",
            log_env={"KVDOCTOR_HOOK_LOG": str(run_dir / "site-hook.log")},
            digest_log=str(run_dir / attribution.DIGEST_LOG),
            reference_digest_log=str(run_dir / attribution.REFERENCE_DIGEST_LOG),
            state_bytes=65536,
        ),
        PORTS,
    )
    with (run_dir / attribution.DIGEST_LOG).open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"event": "error", "message": f"cannot open {run_dir / 'digests.bin'}"}) + "\n")
    r = replace(
        r,
        deployment=d.to_dict(),
        run_dir=str(run_dir),
        logs={s.role: str(run_dir / f"{s.role}.log") for s in d.steps},
        stand_in={"used": True, "log": str(run_dir / STANDIN_LOG), "calls": []},
        cpu_enablers=[{"name": e.name, "where": e.where, "why": e.why} for e in d.enablers],
        warnings=[f"kept {run_dir.parent} for you"],
    )
    argv = ["consistency", "lfm2-1.2b", "--shrink", "--output-dir", str(run_dir.parent), "--bundle", str(dest)]
    envelope.record_argv(argv)
    try:
        written = bundle.write(run_dir, r, d, PROMPTS, _tokens(), workload=W, extra_args=(), copy_to=dest)
    finally:
        envelope.record_argv(None)
    return written, d


def _spellings(text: str) -> list[bytes]:
    """TEXT as a file may hold it: UTF-8, and JSON's escaped spelling."""
    return sorted({text.encode(), json.dumps(text)[1:-1].encode()})


def test_no_file_of_the_bundle_names_the_user_s_paths_or_kvdoctor_s_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "naïve user's runs"  # a space, a quote and a non-ASCII letter: JSON escapes the ï
    home, cwd = tmp_path / "home dir ü", tmp_path / "work"
    for p in (root, home, cwd):
        p.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    dest = cwd / "for-the-issue"
    written, d = _realistic(root, home, dest)
    assert written.path == dest and written.warning is None

    private = [str(tmp_path), str(root), str(home), str(cwd), str(CHECKOUT), "/opt/elsewhere"]
    kvdoctor_values = [v for s in d.steps for k, v in s.env.items() if k.startswith("KVDOCTOR_") or k == "PYTHONPATH"]
    kvdoctor_values = [v for v in kvdoctor_values if "/" in v]  # a number ("65536") is no one's secret
    assert kvdoctor_values and any(str(CHECKOUT) in v for v in kvdoctor_values)
    needles = [n for text in private + kvdoctor_values for n in _spellings(text)]
    for folder in (root / "run" / bundle.BUNDLE_DIR, dest):
        files = [f for f in folder.rglob("*") if f.is_file()]
        assert {"bundle.json", "result.json", "ISSUE.md", "digests.jsonl", "run.py"} <= {f.name for f in files}
        for f in files:
            data = f.read_bytes()
            found = [n.decode(errors="replace") for n in needles if n in data]
            assert not found, f"{f.relative_to(folder)} carries {found}"
            if f.suffix in (".json", ".jsonl", ".md"):  # what kvdoctor wrote (the stand-in's code names its own)
                assert not re.search(rb"KVDOCTOR_(?!STANDIN_LOG)[A-Z_]+", data), f.relative_to(folder)

    doc = json.loads((dest / "trace" / "result.json").read_text())
    assert doc["run_dir"] == "{run_dir}" and doc["model_dir"] == "{checkpoint}"
    assert doc["logs"]["prefill"] == "{run_dir}/prefill.log" and doc["stand_in"]["log"] == f"{{run_dir}}/{STANDIN_LOG}"
    assert doc["warnings"] == ["kept {output_dir} for you"]
    assert "--bundle" in doc["command_line"] and "{bundle}" in doc["command_line"]
    prefill = doc["deployment"]["steps"][0]["env"]
    assert prefill["PYTHONPATH"] == "{bundle}/enablers/site:{bundle}/enablers/shims", prefill  # as in bundle.json
    assert prefill["SGLANG_USE_CPU_ENGINE"] == "1"  # the server's own variables stay
    trace = (dest / "trace" / attribution.DIGEST_LOG).read_text().splitlines()
    assert json.loads(trace[-1])["message"] == "cannot open {run_dir}/digests.bin"
    spec = json.loads((dest / "bundle.json").read_text())
    assert spec["steps"][1]["env"]["PYTHONPATH"] == "{bundle}/enablers/shims"  # run.py's placeholders untouched
    assert (dest / "checkpoint" / "model.safetensors").read_bytes() == b"\x00" * 64  # the weights' bytes as digested


def test_a_path_is_scrubbed_whole_never_a_longer_name_that_begins_like_it(tmp_path: Path) -> None:
    scrub = bundle.Scrub(tmp_path / "run", None, None)
    text = f"{tmp_path}/run/x {tmp_path}/run2/y {tmp_path}/runs {tmp_path}/run.d {tmp_path}/run"
    assert scrub.text(text) == "{run_dir}/x {output_dir}/run2/y {output_dir}/runs {output_dir}/run.d {run_dir}"
    assert os.sep == "/"
