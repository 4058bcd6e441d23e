"""Launch plans: the Inkling preset flag for flag, ports, launchers, overrides, dry runs."""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from kvdoctor.deploy import plan, presets
from kvdoctor.pd.run import PdEvalOptions, prepare
from tests.pd.helpers import GSM8K, invoke

PORTS = plan.Ports(prefill=21100, decode=21200, router=21000, bootstrap=21500, router_metrics=29001)

# sglang test/registered/disaggregation/test_disaggregation_inkling_mxfp8.py, typed out from the
# reference rather than from kvdoctor's preset, with the fixture's port scheme (local, d = 0).
INKLING_COMMON = (
    "--tp 2 --quantization modelopt_fp4 --attention-backend fa4 --page-size 128 "
    "--fp4-gemm-backend flashinfer_trtllm --moe-runner-backend flashinfer_trtllm_routed "
    "--mamba-radix-cache-strategy extra_buffer --mem-fraction-static 0.8 "
    "--max-total-tokens 65536 --swa-full-tokens-ratio 0.1 --mamba-full-memory-ratio 0.1 "
    "--kv-cache-dtype mxfp8"
)
M = "thinkingmachines/Inkling-Small-NVFP4"
INKLING_PREFILL = (
    f"python -m sglang.launch_server --model-path {M} --trust-remote-code "
    f"--disaggregation-mode prefill --disaggregation-bootstrap-port 21500 {INKLING_COMMON} "
    "--enable-hierarchical-cache --disaggregation-transfer-backend mooncake "
    "--host 127.0.0.1 --port 21100"
)
INKLING_DECODE = (
    f"python -m sglang.launch_server --model-path {M} --trust-remote-code "
    f"--disaggregation-mode decode --disaggregation-bootstrap-port 21500 {INKLING_COMMON} "
    "--base-gpu-id 2 --disaggregation-transfer-backend mooncake --host 127.0.0.1 --port 21200"
)
INKLING_ROUTER = (
    "python -m sglang_router.launch_router --pd-disaggregation --mini-lb "
    "--prefill http://127.0.0.1:21100 --decode http://127.0.0.1:21200 "
    "--host 127.0.0.1 --port 21000"
)
INKLING_ENV = {"SGLANG_ENABLE_UNIFIED_RADIX_TREE": "1", "MC_TCP_ENABLE_CONNECTION_POOL": "true"}


def inkling(**overrides: object) -> plan.LaunchPlan:
    options = plan.PlanOptions(model=M, preset=presets.INKLING_MXFP8, mini_lb=True, pool_tokens=1024, **overrides)  # type: ignore[arg-type]
    return plan.build(options, PORTS)


def test_inkling_preset_is_the_reference_test_exactly() -> None:
    steps = inkling().steps
    assert [s.role for s in steps] == ["prefill", "decode", "router"]
    assert [shlex.join(s.argv) for s in steps] == [INKLING_PREFILL, INKLING_DECODE, INKLING_ROUTER]
    assert [dict(s.env) for s in steps] == [INKLING_ENV, INKLING_ENV, {}]
    e = presets.INKLING_MXFP8.eval
    assert (e.num_shots, e.num_questions, e.threshold, e.max_new_tokens, e.parallel) == (10, 200, 0.80, 512, 128)


def test_inkling_dry_run_prints_the_reference_lines(tmp_path: Path) -> None:
    run = invoke(
        [
            "pd-eval",
            M,
            "--preset",
            "inkling-mxfp8",
            "--dry-run",
            "--data-path",
            str(GSM8K),
            "--prefill-port",
            "21100",
            "--decode-port",
            "21200",
            "--router-port",
            "21000",
            "--bootstrap-port",
            "21500",
            "--output-dir",
            str(tmp_path),
        ]
    )
    assert run.exit_code == 0, run.output
    env = " ".join(f"{k}={v}" for k, v in INKLING_ENV.items())
    lines = run.stdout.splitlines()
    assert f"{env} {INKLING_PREFILL}" in lines
    assert f"{env} {INKLING_DECODE}" in lines
    assert INKLING_ROUTER in lines
    assert lines.index(f"{env} {INKLING_PREFILL}") < lines.index(f"{env} {INKLING_DECODE}")
    assert "GSM8K 10-shot, 200 questions, threshold 0.80" in run.stdout
    assert not list(tmp_path.iterdir())  # nothing started, nothing written


def test_dry_run_json_starts_nothing(tmp_path: Path) -> None:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    run = invoke(["pd-eval", "m", "--dry-run", "--json", "--data-path", str(GSM8K)])
    assert run.exit_code == 0
    data = json.loads(run.stdout)
    assert data["dry_run"] is True and data["prediction"]["retraction_expected"] is True
    assert {p.pid for p in psutil.Process().children(recursive=True)} == before


def test_bootstrap_port_is_shared_and_decode_has_its_own_gpus() -> None:
    options = plan.PlanOptions(model="m", preset=presets.generic(4), pool_tokens=4096)
    prefill, decode, router = plan.build(options, PORTS).steps
    for step in (prefill, decode):
        assert plan.flag_value(step.argv, "--disaggregation-bootstrap-port") == "21500"
        assert plan.flag_value(step.argv, "--tp") == "4"
        assert plan.flag_value(step.argv, "--max-total-tokens") == "4096"
    assert plan.flag_value(prefill.argv, "--disaggregation-mode") == "prefill"
    assert "--enable-hierarchical-cache" in prefill.argv
    assert plan.flag_value(decode.argv, "--base-gpu-id") == "4"
    assert "--enable-metrics" in decode.argv  # the guard reads decode's /metrics
    assert "--disaggregation-bootstrap-port" not in router.argv
    assert plan.flag_value(router.argv, "--prometheus-port") == "29001"


def test_launchers_change_the_command_not_the_arguments() -> None:
    default = plan.build(plan.PlanOptions(model="m", preset=presets.generic(1)), PORTS)
    custom = plan.build(
        plan.PlanOptions(model="m", preset=presets.generic(1), launcher="my-server --x", router_launcher="my-router"),
        PORTS,
    )
    assert [s.argv[3:] for s in default.steps[:2]] == [s.argv[2:] for s in custom.steps[:2]]
    assert default.steps[2].argv[3:] == custom.steps[2].argv[1:]


def test_tp_override_moves_decode_gpus() -> None:
    preset = presets.with_tp(presets.INKLING_MXFP8, 4)
    steps = plan.build(plan.PlanOptions(model=M, preset=preset), PORTS).steps
    assert plan.flag_value(steps[0].argv, "--tp") == "4"
    assert plan.flag_value(steps[1].argv, "--base-gpu-id") == "4"


def test_user_pool_bound_wins_over_the_default() -> None:
    options = plan.PlanOptions(
        model="m", preset=presets.generic(1), pool_tokens=4096, extra_args=("--max-total-tokens", "999")
    )
    decode = plan.build(options, PORTS).steps[1]
    assert decode.argv.count("--max-total-tokens") == 1
    assert plan.flag_value(decode.argv, "--max-total-tokens") == "999"


def test_ib_device_and_transfer_backend_reach_both_roles() -> None:
    options = plan.PlanOptions(model="m", preset=presets.generic(1), transfer_backend="nixl", ib_device="mlx5_0")
    for step in plan.build(options, PORTS).steps[:2]:
        assert plan.flag_value(step.argv, "--disaggregation-transfer-backend") == "nixl"
        assert plan.flag_value(step.argv, "--disaggregation-ib-device") == "mlx5_0"


def test_free_ports_are_distinct_unless_pinned() -> None:
    prepared = prepare(PdEvalOptions(model="m", data_path=GSM8K, router_port=23456), download=False)
    urls = [s.url for s in prepared.plan.steps]
    assert urls[2] == "http://127.0.0.1:23456"
    assert len({*urls, prepared.plan.bootstrap_port}) == 4


def test_external_servers_start_nothing() -> None:
    launch = plan.external("m", router_url="http://r:1/", decode_url="http://d:2", prefill_url=None)
    assert [(s.role, s.argv, s.url) for s in launch.steps] == [
        ("decode", (), "http://d:2"),
        ("router", (), "http://r:1"),
    ]


@pytest.mark.parametrize(
    "args",
    [
        ["--threshold", "1.5"],
        ["--parallel", "0"],
        ["--tp", "0"],
        ["--num-shots", "5000"],
        ["--prefill-url", "http://x:1"],  # no router
        ["--router-url", "http://x:1"],  # no decode to read retractions from
        ["--data-path", "/nonexistent/test.jsonl"],
        ["--timeout", "nan"],
        ["--timeout", "inf"],
        ["--timeout", "0"],
        ["--timeout", "-5"],
        ["--request-timeout", "0"],
        ["--request-timeout", "nan"],
        ["--prefill-port", "0"],
        ["--router-port", "70000"],
        ["--prefill-port", "21000", "--decode-port", "21000"],
        ["--bootstrap-port", "21000", "--router-port", "21000"],
        ["--host", "no-such-host.invalid"],
        ["--launcher", "python 'unbalanced"],
        ["--router-launcher", 'router "unbalanced'],
    ],
)
def test_bad_input_exits_2(args: list[str]) -> None:
    extra = [] if "--data-path" in args else ["--data-path", str(GSM8K)]
    run = invoke(["pd-eval", "m", "--dry-run", *extra, *args])
    assert run.exit_code == 2, run.output
    assert "kvdoctor: " in run.stderr and "Traceback" not in run.output


def test_dry_run_needs_no_torch_and_no_server() -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from kvdoctor.cli.app import app\n"
        f"r = CliRunner().invoke(app, ['pd-eval', 'inkling-small', '--preset', 'inkling-mxfp8',"
        f" '--dry-run', '--data-path', {str(GSM8K)!r}])\n"
        "assert r.exit_code == 0, r.output\n"
        "assert 'retraction backup: cpu_tensor' in r.output, r.output\n"
        "heavy = [m for m in ('torch', 'triton', 'pandas') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("flags", "instead"),
    [
        (["--tp-size", "4"], "--tp"),
        (["--tp=4"], "--tp"),
        (["--tensor-parallel-size", "2"], "--tp"),
        (["--base-gpu-id", "3"], "--tp"),
        (["--port", "30000"], "--prefill-port"),
        (["--host", "0.0.0.0"], "--host"),
        (["--disaggregation-mode", "null"], "kvdoctor sets prefill and decode"),
        (["--disaggregation-bootstrap-port", "8998"], "--bootstrap-port"),
    ],
)
def test_extra_flags_that_contradict_the_plan_are_refused(flags: list[str], instead: str) -> None:
    run = invoke(["pd-eval", "m", "--dry-run", "--data-path", str(GSM8K), "--", *flags])
    assert run.exit_code == 2, run.output
    assert "would contradict the launch plan" in run.stderr and instead in run.stderr


def test_bad_data_files_exit_2(tmp_path: Path) -> None:
    binary = tmp_path / "latin1.jsonl"
    binary.write_bytes(b'{"question": "caf\xe9", "answer": "#### 1"}\n')
    typed = tmp_path / "typed.jsonl"
    typed.write_text('{"question": 1, "answer": ["#### 1"]}\n')
    for path in (binary, typed):
        run = invoke(["pd-eval", "m", "--dry-run", "--data-path", str(path)])
        assert run.exit_code == 2, run.output
        assert str(path) in run.stderr and "Traceback" not in run.output


def test_ipv6_host_gets_bracketed_urls() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    prepared = prepare(PdEvalOptions(model="m", data_path=GSM8K, host="::1"), download=False)
    assert all(s.url.startswith("http://[::1]:") for s in prepared.plan.steps)
    assert plan.flag_value(prepared.plan.steps[0].argv, "--host") == "::1"


@pytest.mark.parametrize(
    ("mini_lb", "ready", "metrics_port"),
    [(True, "/health_generate", None), (False, "/readiness", "29001")],
)
def test_router_readiness_and_metrics_port_follow_the_router_kind(
    mini_lb: bool, ready: str, metrics_port: str | None
) -> None:
    for preset in (presets.generic(1), presets.INKLING_MXFP8):
        options = plan.PlanOptions(model="m", preset=preset, mini_lb=mini_lb)
        router = plan.build(options, PORTS).step("router")
        assert router is not None and router.health_path == ready
        assert plan.flag_value(router.argv, "--prometheus-port") == metrics_port
