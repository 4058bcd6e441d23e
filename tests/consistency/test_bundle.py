"""The reproduction bundle (kvdoctor.consistency.bundle) written from the real PD plan, and its stand-alone files.
Running a bundle against real servers with kvdoctor not importable: test_bundle_servers.py."""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kvdoctor._exceptions import InputError
from kvdoctor.consistency import attribution, bundle, deploy
from kvdoctor.consistency.compare import Generation, RequestDiff
from kvdoctor.consistency.result import ConsistencyResult
from kvdoctor.consistency.workload import Workload
from kvdoctor.engines.sglang.cpu_shims import SHIM_DIR

REPRO = Path(bundle.__file__).parent / "repro"
PORTS = [34101, 34102, 34103, 34104, 34105, 34106]
PROMPTS = [[11, 12, 13], [14, 15, 16]]
W = Workload(requests=2, prompt_tokens=3, max_new_tokens=4, concurrency=2)


def _deployment(model_dir: Path) -> deploy.Deployment:
    return deploy.build(
        deploy.DeployOptions(
            model_dir=str(model_dir),
            topology="pd",
            device="cpu",
            workload=W,
            has_recurrent=True,
            stand_in_dir=str(SHIM_DIR),
            site_hook_dir=str(Path(SHIM_DIR).parent / "site_hook"),
            inherited_pythonpath="/home/user/lib",
            log_env={"KVDOCTOR_HOOK_LOG": "/run/site-hook.log"},
            digest_log="/run/digests.jsonl",
            reference_digest_log="/run/digests-reference.jsonl",
            state_bytes=65536,
        ),
        PORTS,
    )


def _red(tmp_path: Path, *, overlap_finding: bool = True) -> tuple[ConsistencyResult, Path]:
    model = tmp_path / "ckpt"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "lfm2"}', encoding="utf-8")
    (model / "model.safetensors").write_bytes(b"\x00" * 64)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / attribution.DIGEST_LOG).write_text('{"event": "scheduler", "t": 0, "overlap": true}\n', "utf-8")
    trace = attribution.StateTrace(str(run_dir / attribution.DIGEST_LOG), recorded=True, overlap=True)
    kind = "state_ahead_overlap" if overlap_finding else "backup_lost"
    trace.finding = {"sentence": "conv_state: backed up ahead", "component": "conv_state", "cite": ["a.py:1-2 (f)"]}
    trace.finding["kinds"] = [{"kind": kind}]
    r = ConsistencyResult(
        "lfm2-1.2b",
        "lfm2",
        "pd",
        "cpu",
        True,
        W.to_dict(),
        model_dir=str(model),
        checkpoint={"path": str(model)},  # type: ignore[arg-type]
        weights_digest="ab" * 32,
        requests=[RequestDiff(0, 4, 4, 4, False), RequestDiff(1, 4, 4, 2, True, position=2, ref_token=7, got_token=9)],
        identical=1,
        total=2,
        exit_code=1,
        passed=False,
        state_trace=trace,
        retractions={"reference": 0, "pressured": 3},
    )
    return r, run_dir


def _tokens() -> tuple[list[Generation], list[Generation]]:
    ref = [Generation((1, 2, 3, 4), (-0.1, -0.2, -0.3, -0.4)), Generation((5, 6, 7, 8), (-0.5, -0.6, -0.7, -0.8))]
    got = [ref[0], Generation((5, 6, 9, 9), (-0.5, -0.6, -0.9, -0.9))]
    return ref, got


def _write(tmp_path: Path, copy_to: Path | None = None, **kw: Any) -> tuple[bundle.Written, ConsistencyResult]:
    r, run_dir = _red(tmp_path, **kw)
    d = _deployment(Path(r.model_dir or ""))
    return bundle.write(run_dir, r, d, PROMPTS, _tokens(), workload=W, extra_args=(), copy_to=copy_to), r


def test_the_bundle_holds_the_red_deployment_and_nothing_of_kvdoctor(tmp_path: Path) -> None:
    written, _ = _write(tmp_path)
    root = written.path
    assert root == tmp_path / "run" / "bundle"
    spec = json.loads((root / "bundle.json").read_text())
    assert [s["role"] for s in spec["steps"]] == ["prefill", "decode-pressured", "router-pressured"]
    text = json.dumps(spec)
    assert "kvdoctor/engines" not in text and "/home/user/lib" not in text and "/run/" not in text
    assert not any(str(p) in text for p in PORTS)  # every port a placeholder the runner fills
    assert spec["ports"] == 4  # prefill, bootstrap, the pressured decode and router
    decode = spec["steps"][1]
    assert decode["argv"][0] == "{python}" and "{checkpoint}" in decode["argv"]
    assert "cpu_tensor" in decode["argv"] and decode["takes_extra_flags"]
    assert {k for k in decode["env"] if k.startswith("KVDOCTOR_")} == {"KVDOCTOR_STANDIN_LOG"}
    assert decode["env"]["PYTHONPATH"] == "{bundle}/enablers/shims"
    prefill = spec["steps"][0]["env"]
    assert prefill["PYTHONPATH"] == "{bundle}/enablers/site:{bundle}/enablers/shims"
    assert prefill["REPRO_PATCHES"] == "mooncake-host-indices"
    assert not spec["steps"][2]["takes_extra_flags"]  # the router takes no SGLang server flag
    assert spec["expected"][1]["tokens"] == [5, 6, 7, 8] and spec["observed"][1]["tokens"] == [5, 6, 9, 9]
    assert spec["bodies"][0]["input_ids"] == PROMPTS[0] and spec["concurrency"] == 2
    assert (root / "enablers" / "shims" / "sgl_kernel" / "__init__.py").exists()
    assert (root / "enablers" / "site" / "sitecustomize.py").exists()
    assert set(spec["checkpoint_sha256"]) == {"config.json", "model.safetensors"}
    assert (root / "checkpoint" / "model.safetensors").read_bytes() == b"\x00" * 64
    assert (root / "trace" / attribution.DIGEST_LOG).exists() and (root / "run.py").exists()
    issue = (root / "ISSUE.md").read_text()
    assert "python3 run.py -- --disable-overlap-schedule" in issue and "request 1 at token 2: expected 7" in issue
    assert "`a.py:1-2 (f)`" in issue
    assert not [p for p in (tmp_path / "run").iterdir() if p.name.startswith(".bundle-")]  # no staging left


def test_no_overlap_finding_no_workaround_claimed(tmp_path: Path) -> None:
    written, _ = _write(tmp_path, overlap_finding=False)
    issue = (written.path / "ISSUE.md").read_text()
    assert "--disable-overlap-schedule" not in issue and "None known." in issue


def test_bundle_copies_whole_into_an_empty_folder_and_refuses_one_that_holds_anything(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    dest.mkdir()
    written, _ = _write(tmp_path, copy_to=dest)
    assert written.path == dest and (dest / "run.py").exists() and (dest / "bundle.json").exists()
    with pytest.raises(InputError, match="not an empty folder"):
        bundle.check_destination(dest)
    with pytest.raises(InputError, match="parent folder"):
        bundle.check_destination(tmp_path / "missing" / "b")
    bundle.check_destination(tmp_path / "new")  # a new folder is fine


def test_a_failed_write_leaves_no_half_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any, **__: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(bundle, "issue_text", broken)
    with pytest.raises(OSError, match="disk full"):
        _write(tmp_path)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [attribution.DIGEST_LOG]


def test_only_the_server_s_own_red_gets_a_bundle(tmp_path: Path) -> None:
    r, _ = _red(tmp_path)
    assert bundle.why_not(r, None) is None
    assert "kvdoctor's fault drop-kv" in (bundle.why_not(r, "drop-kv") or "")
    assert "not red" in (bundle.why_not(replace(r, exit_code=0, passed=True), None) or "")
    assert "vllm" in (bundle.why_not(replace(r, server="vllm"), None) or "")


@pytest.mark.parametrize("name", ["run.py", "sitecustomize.py"])
def test_the_bundle_s_files_import_the_standard_library_only(name: str) -> None:
    tree = ast.parse((REPRO / name).read_text())
    imported = {
        (a.name if isinstance(n, ast.Import) else n.module or "").split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in (n.names if isinstance(n, ast.Import) else [n])
    }
    assert imported and imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def _runner() -> Any:
    spec = importlib.util.spec_from_file_location("repro_run", REPRO / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_runner_names_a_divergence_and_a_drift_and_passes_what_matches() -> None:
    run = _runner()
    expected = [{"tokens": [1, 2, 3], "logprobs": [-0.1, -0.2, -0.3]}] * 3
    got = [
        {"tokens": [1, 2, 3], "logprobs": [-0.1, -0.2, -0.3]},
        {"tokens": [1, 9, 3], "logprobs": [-0.1, -0.2, -0.3]},
        {"tokens": [1, 2, 3], "logprobs": [-0.1, -0.25, -0.3]},
    ]
    rows = run.compare(expected, got, 1e-4)
    assert [r["diverged_at"] for r in rows] == [None, 1, None]
    assert (rows[1]["expected"], rows[1]["observed"]) == (2, 9)
    assert [r["drifts_at"] for r in rows] == [None, None, 1]
    assert run.fill("{python} --port {port3} {checkpoint}", {"python": "p", "port3": "9", "checkpoint": "c"}) == (
        "p --port 9 c"
    )


def test_the_runner_picks_ports_below_the_ephemeral_range_as_kvdoctor_does() -> None:
    """A server binds its port after its model loads; an ephemeral one may be taken by then (test_port_race.py)."""
    from kvdoctor.deploy.ports import ephemeral_ports, port_pool

    chosen = _runner().free_ports(8)
    assert len(set(chosen)) == 8 and all(p in port_pool() and p < ephemeral_ports().start for p in chosen), chosen
