"""Sliding-window models on SGLang's CPU path without a server: which are refused (exit 2, one line, SGLang's own
line, before any work), which run (an all-SWA config: ``PureSWARadixCache``), and that a sliding-window fault runs in
the pressured server of a single-server run, armed by the run, and is red when it never fired (the real runs are
test_sglang_window_servers.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvdoctor._exceptions import EXIT_INPUT, NotRunnableHere
from kvdoctor.cli.app import app
from kvdoctor.consistency import deploy, gates, run, runnable
from kvdoctor.consistency.fault_gate import fault_fired_from
from kvdoctor.consistency.result import ConsistencyResult, FaultReport, settled
from kvdoctor.consistency.workload import Workload
from kvdoctor.core.config import resolve_config_path
from kvdoctor.engines import hook_log

# An all-SWA model SGLang 0.5.23 serves on a CPU: Laguna (a hybrid-SWA architecture, srt/configs/model_config.py:
# is_hybrid_swa_model) with every layer sliding, so its pool is SGLang's all-SWA one and its tree PureSWARadixCache
# (srt/mem_cache/registry.py:127-130); dense MLPs; a 64-token window that a 32-token prompt outgrows in 33 decodes.
ALL_SWA_LAGUNA: dict[str, Any] = json.loads(resolve_config_path("laguna-all-swa").read_text(encoding="utf-8"))


def all_swa_laguna(directory: Path) -> Path:
    """A model directory holding :data:`ALL_SWA_LAGUNA` (``--shrink`` writes its random checkpoint)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(ALL_SWA_LAGUNA), encoding="utf-8")
    return directory


def _kind(model: str) -> runnable.ModelKind:
    path = resolve_config_path(model)
    return runnable.classify(json.loads(path.read_text()), str(path))


def test_gpt_oss_is_refused_on_cpu_with_sglang_s_own_assert() -> None:
    with pytest.raises(NotRunnableHere, match=r"model_hook\.py:536-543") as caught:
        runnable.check_cpu(_kind("gpt-oss-20b"), "gpt-oss-20b")
    assert caught.value.exit_code == EXIT_INPUT
    assert "torch_native has no sinks" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("model", ["gemma-3-12b", "llama-3.1-8b"])
def test_models_sglang_serves_on_cpu_are_not_refused(model: str) -> None:
    runnable.check_cpu(_kind(model), model)


MIXED = {**ALL_SWA_LAGUNA, "layer_types": ["sliding_attention", "full_attention"]}


@pytest.mark.parametrize(
    "kind",
    [_kind("gemma-4"), _kind("step-3.5"), runnable.classify(MIXED, "laguna")],
    ids=["gemma-4", "step-3.5", "laguna-sliding-full"],
)
def test_hybrid_sliding_window_models_are_refused_on_cpu_naming_torch_native_s_read(kind: runnable.ModelKind) -> None:
    """Measured: SGLang's torch_native reads a sliding layer's SWA sub-pool at full-pool slots (IndexError)."""
    assert kind.has_swa and not kind.all_swa
    with pytest.raises(NotRunnableHere, match=r"torch_native_backend\.py:240-241") as caught:
        runnable.check_cpu(kind, "m")
    assert caught.value.exit_code == EXIT_INPUT and "an all-SWA config" in str(caught.value)


def test_an_all_swa_model_runs_and_has_the_sliding_window_pool(tmp_path: Path) -> None:
    kind = runnable.classify(ALL_SWA_LAGUNA, "laguna")
    assert kind.has_swa and kind.all_swa and not kind.has_recurrent and kind.architectures == ("LagunaForCausalLM",)
    runnable.check_cpu(kind, str(tmp_path))


def test_the_cli_refuses_gpt_oss_in_one_line_before_any_work(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = CliRunner().invoke(app, ["consistency", "gpt-oss-20b", "--shrink", "--output-dir", str(out)])
    assert done.exit_code == EXIT_INPUT, done.output
    lines = [line for line in done.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "GptOssForCausalLM" in lines[0] and "model_hook.py:536-543" in lines[0]
    assert not out.exists(), "no run directory, no checkpoint"


def test_a_sliding_window_fault_runs_in_the_pressured_single_server_and_is_armed(tmp_path: Path) -> None:
    w = Workload(8, 32, 160, 8)
    model = str(all_swa_laguna(tmp_path / "m"))
    prepared = run.prepare(run.ConsistencyOptions(model, shrink=True, inject="swa-early-evict", workload=w))
    plan = run.plan_for(prepared, "/ckpt", Path("/run"))
    ref, subject = plan.steps
    assert subject.env["KVDOCTOR_INJECT"] == "swa-early-evict" and "KVDOCTOR_INJECT" not in ref.env
    assert plan.injected_role == "pressured" and subject.env["KVDOCTOR_ARM"] == "/run/armed"
    assert "site_hook" in subject.env["PYTHONPATH"]


def test_a_retraction_fault_on_one_server_is_still_refused() -> None:
    o = deploy.DeployOptions("/m", "single", "cpu", Workload(), has_recurrent=False, inject="drop-swa")
    with pytest.raises(Exception, match="needs --topology pd"):
        deploy.build(o, [1, 2])


def test_a_window_fault_on_a_model_without_the_pool_is_refused_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = ["consistency", "gemma-3-12b", "--shrink", "--inject", "swa-early-evict", "--output-dir", str(out)]
    done = CliRunner().invoke(app, argv)
    assert done.exit_code == EXIT_INPUT, done.output
    assert "needs a sliding-window KV sub-pool" in done.output and not out.exists()


def _result(fault: str) -> ConsistencyResult:
    r = ConsistencyResult("m", "hybrid_swa", "single", "cpu", True, {})
    return settled(replace(r, fault=FaultReport(fault, "pressured"), gates=[gates.Gate("tokens", True, "passed", "")]))


def _log(path: Path, *lines: str) -> hook_log.EventLog:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return hook_log.read(path)


def test_a_window_fault_that_never_fired_turns_the_run_red(tmp_path: Path) -> None:
    quiet = _log(tmp_path / "a.log", "7 fault-installed swa-early-evict on ScheduleBatch._evict_swa")
    red = fault_fired_from(quiet, _result("swa-early-evict"), "sglang")
    assert red.gates[-1].name == "fault-fired" and not red.passed and red.exit_reason == "no_teeth"
    assert "no request decoded past its sliding window" in red.gates[-1].message
    fired = _log(
        tmp_path / "b.log",
        "7 fault-installed swa-early-evict on ScheduleBatch._evict_swa",
        "7 fault-fired swa-early-evict rid=a pre_len=97 window=63: frees up to 65",
        "7 fault-fired swa-early-evict rid=b pre_len=98 window=63: frees up to 66",
    )
    ok = fault_fired_from(fired, _result("swa-early-evict"), "sglang")
    assert ok.passed and ok.fault is not None and ok.fault.installed and ok.fault.restores == 2
    assert "at 2 window eviction(s)" in ok.gates[-1].message
    other = _result("blank-state-on-hit")
    quiet_hit = fault_fired_from(quiet, other, "sglang")  # the log names the window fault only
    assert quiet_hit.gates[-1].name == "fault-fired" and not quiet_hit.fault.installed, "its own fault's lines only"


def test_sglang_s_log_reader_gates_a_window_fault(tmp_path: Path) -> None:
    from kvdoctor.consistency.servers.sglang.deployment import DEPLOYMENT, HOOK_LOG

    model = str(all_swa_laguna(tmp_path / "m"))
    prepared = run.prepare(run.ConsistencyOptions(model, shrink=True, inject="swa-early-evict"))
    _log(tmp_path / HOOK_LOG, "7 fault-installed swa-early-evict on ScheduleBatch._evict_swa")
    read = DEPLOYMENT.read_log(prepared, tmp_path, _result("swa-early-evict"), lambda *a: None)
    assert read.exit_reason == "no_teeth" and read.gates[-1].name == "fault-fired"
