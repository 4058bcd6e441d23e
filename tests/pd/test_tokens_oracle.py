"""``pd-eval --oracle tokens`` before anything starts, and its result through pd-eval's reporters.

No server here: option refusals (each oracle's own options refused with the other, exit 2, one line, nothing
written), the dry run (both deployments; the pressured one is pd-eval's own plan, the reference the same plan
with the roomy pool), the workload mapping, and consistency's outcomes (identical, diverged, no retraction,
a deployment that failed) as pd-eval's JSON, JUnit, rows and verdict. The real run is
tests/consistency/test_pd_eval_tokens_servers.py (``server`` + ``matrix``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.result import ConsistencyResult
from kvdoctor.consistency.run import evaluate
from kvdoctor.consistency.workload import Workload
from kvdoctor.deploy import plan
from kvdoctor.pd import oracle, tokens
from kvdoctor.pd import report as pd_report
from kvdoctor.pd.run import PdEvalOptions
from kvdoctor.pd.run import prepare as gsm8k_prepare
from kvdoctor.report import junit
from tests.pd.helpers import invoke
from tests.schema_check import assert_valid, errors

TOKENS = ("pd-eval", "llama-3.1-8b", "--oracle", "tokens", "--shrink", "--device", "cpu")


@pytest.mark.parametrize(
    ("args", "flag", "other"),
    [
        (("--oracle", "tokens", "--threshold", "0.5"), "--threshold", "gsm8k"),
        (("--oracle", "tokens", "--num-shots", "3"), "--num-shots", "gsm8k"),
        (("--oracle", "tokens", "--data-path", "x.jsonl"), "--data-path", "gsm8k"),
        (("--oracle", "tokens", "--api", "generate"), "--api", "gsm8k"),
        (("--oracle", "tokens", "--allow-no-retraction"), "--allow-no-retraction", "gsm8k"),
        (("--oracle", "tokens", "--router-url", "http://127.0.0.1:1"), "--router-url", "gsm8k"),
        (("--oracle", "tokens", "--decode-port", "31999"), "--decode-port", "gsm8k"),
        (("--shrink",), "--shrink", "tokens"),
        (("--inject", "drop-kv"), "--inject", "tokens"),
        (("--oracle", "gsm8k", "--device", "cpu"), "--device", "tokens"),
        (("--prompt-tokens", "8"), "--prompt-tokens", "tokens"),
        (("--seed", "1"), "--seed", "tokens"),
    ],
)
def test_an_option_the_oracle_does_not_read_is_one_line_and_exit_2(
    tmp_path: Path, args: tuple[str, ...], flag: str, other: str
) -> None:
    out = tmp_path / "out"
    run = invoke(["pd-eval", "llama-3.1-8b", *args, "--output-dir", str(out)])
    assert run.exit_code == 2, run.output
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("kvdoctor: error: ")
    assert f"{flag} applies to --oracle {other} only" in run.stderr
    assert not out.exists()  # refused before anything ran or was written


def test_every_refusal_names_an_option_the_cli_really_has() -> None:
    from typer.main import get_command

    from kvdoctor.cli.app import app

    params = get_command(app).commands["pd-eval"].params  # type: ignore[attr-defined]
    spelled = {opt for p in params for opt in p.opts}
    assert {flag for flag, _, _ in (*oracle.GSM8K_ONLY, *oracle.TOKENS_ONLY)} <= spelled


def test_the_gsm8k_oracle_stays_the_default_and_unchanged(tmp_path: Path) -> None:
    run = invoke(["pd-eval", "llama-3.1-8b", "--dry-run", "--json"])
    assert run.exit_code == 0, run.output
    doc = json.loads(run.stdout)
    assert "oracle" not in doc and doc["prediction"] is not None
    assert [s["role"] for s in doc["launch_plan"]["steps"]] == ["prefill", "decode", "router"]


def dry_run_json(*extra: str) -> dict[str, object]:
    run = invoke([*TOKENS, "--dry-run", "--json", *extra])
    assert run.exit_code == 0, run.output
    return assert_valid(run.stdout, "pd-eval")


def _value(argv: list[str], flag: str) -> str | None:
    return plan.flag_value(argv, flag)


def test_the_dry_run_shows_both_deployments_sharing_one_prefill() -> None:
    doc = dry_run_json("--", "--page-size", "16")
    assert doc["oracle"] == "tokens" and doc["dry_run"] is True and doc["prediction"] is None
    steps = {s["role"]: s for s in doc["launch_plan"]["steps"]}  # type: ignore[index]
    assert list(steps) == ["prefill", "decode-reference", "decode-pressured", "router-reference", "router-pressured"]
    ref, press = steps["decode-reference"]["argv"], steps["decode-pressured"]["argv"]
    assert int(_value(press, "--max-total-tokens")) < int(_value(ref, "--max-total-tokens"))  # type: ignore[arg-type]
    for argv in (steps["prefill"]["argv"], ref, press):  # one pool bound each, the server flags after -- in each
        assert argv.count("--max-total-tokens") == 1 and argv.count("--enable-metrics") == 1
        assert _value(argv, "--page-size") == "16" and _value(argv, "--tp") == "1"
    # The reference is the pressured plan with the roomy pool: the same words but the pool and the port.
    norm = [
        [w for i, w in enumerate(a) if i == 0 or a[i - 1] not in ("--max-total-tokens", "--port")] for a in (ref, press)
    ]
    assert norm[0] == norm[1]
    assert {"KVDOCTOR_DIGEST_LOG"} <= set(steps["decode-pressured"]["env"]) - set(steps["decode-reference"]["env"])
    routers = [steps[role]["argv"] for role in ("router-reference", "router-pressured")]
    assert [_value(r, "--decode") for r in routers] == [
        steps[d]["url"] for d in ("decode-reference", "decode-pressured")
    ]
    assert len({_value(r, "--prometheus-port") for r in routers} - {None}) == 2  # the Rust router: a port each
    enablers = {e["name"] for e in doc["enablers"]}  # type: ignore[union-attr]
    assert "--enable-hierarchical-cache dropped (preset generic)" in enablers
    assert "--base-gpu-id dropped (preset generic)" in enablers


def test_the_workload_comes_from_pd_evals_own_knobs() -> None:
    doc = dry_run_json(
        "--num-questions", "5", "--parallel", "3", "--max-new-tokens", "7", "--prompt-tokens", "9", "--seed", "4"
    )
    assert doc["workload"] == {
        "requests": 5,
        "prompt_tokens": 9,
        "max_new_tokens": 7,
        "concurrency": 3,
        "seed": 4,
        "top_logprobs": 2,
    }
    assert dry_run_json()["workload"] == Workload().to_dict()  # consistency's defaults, not GSM8K's 512/128


def test_the_pressured_deployment_is_pd_evals_own_plan_on_a_gpu() -> None:
    """--tp 2, the Rust router, extra flags: every word of pd-eval's own decode and prefill command (its pool
    bound aside) is in the pressured deployment's, in order; kvdoctor adds only its own flags."""
    o = PdEvalOptions(model="llama-3.1-8b", tp=2, extra_args=("--page-size", "32"))
    own = gsm8k_prepare(o, download=False, dry_run=True).plan
    t = tokens.prepare(PdEvalOptions(**{**o.__dict__, "oracle": "tokens", "shrink": True, "device": "cuda"}))
    assert t.preview.enablers == ()  # nothing changes for a CPU on a GPU
    steps = {s.role: s for s in t.launch_plan.steps}
    placeholders = ("--model-path", "--port", "--disaggregation-bootstrap-port", "--max-total-tokens")

    def words(argv: tuple[str, ...]) -> list[str]:  # --enable-metrics: kvdoctor's own, on every server
        kept = [w for i, w in enumerate(argv) if w not in placeholders and (i == 0 or argv[i - 1] not in placeholders)]
        return [w for w in kept if w != "--enable-metrics"]

    for role, mine in (("prefill", "prefill"), ("decode", "decode-pressured"), ("decode", "decode-reference")):
        theirs = iter(words(steps[mine].argv))
        expected = own.step(role)
        assert expected is not None
        assert all(w in theirs for w in words(expected.argv)), (role, expected.argv, steps[mine].argv)
        assert dict(expected.env).items() <= dict(steps[mine].env).items()
    press = steps["decode-pressured"].argv
    assert _value(press, "--base-gpu-id") == "2" and _value(press, "--disaggregation-transfer-backend") == "mooncake"
    routers = [steps["router-reference"].argv, steps["router-pressured"].argv]
    assert all("--mini-lb" not in r for r in routers)  # pd-eval's default, the Rust router
    metrics = {_value(list(r), "--prometheus-port") for r in routers}
    assert len(metrics) == 2 and None not in metrics  # each its own Prometheus port


def test_a_preset_bound_is_replaced_by_the_sized_pools() -> None:
    # Inkling has no causal-LM class in transformers, so --shrink refuses it (tests/consistency/test_shrink_all.py);
    # the preset's pool bound is replaced the same way for any model it is applied to.
    o = PdEvalOptions(model="llama-3.1-8b", preset="inkling-mxfp8", oracle="tokens", shrink=True, device="cuda")
    t = tokens.prepare(o)
    press = t.preview.step("decode-pressured").argv
    assert press.count("--max-total-tokens") == 1 and _value(press, "--max-total-tokens") == str(
        t.preview.pressured_pool
    )
    assert _value(press, "--kv-cache-dtype") == "mxfp8" and t.launch_plan.preset == "inkling-mxfp8"
    assert "--mini-lb" in t.preview.step("router-pressured").argv  # the preset's router


def test_a_pool_bound_after_dashdash_is_refused_as_consistency_refuses_it() -> None:
    run = invoke([*TOKENS, "--dry-run", "--", "--max-total-tokens", "4096"])
    assert run.exit_code == 2 and "--max-total-tokens after -- is not allowed" in run.stderr


def test_a_fault_for_state_the_model_lacks_is_refused() -> None:
    run = invoke([*TOKENS, "--dry-run", "--inject", "missing-mamba"])
    assert run.exit_code == 2 and "needs recurrent" in run.stderr


def _consistency(diverge: bool = False, pressured: int = 5) -> ConsistencyResult:
    prefill = plan.Step("prefill", ("x", "--disaggregation-bootstrap-port", "8998"), "http://127.0.0.1:1", "/health")
    r = ConsistencyResult(
        "llama-3.1-8b",
        "dense",
        "pd",
        "cpu",
        True,
        Workload(requests=4).to_dict(),
        retractions={"reference": 0, "pressured": pressured},
        retraction_source="metrics",
        stand_in={"used": True, "log": "x", "calls": []},
        deployment={"steps": [prefill.to_dict()]},
        run_dir="/tmp/run",
        wall_s=12.0,
    )
    ref = [Generation(tuple(range(i, i + 20)), tuple([-1.0] * 20), tuple([0.1] * 20)) for i in range(4)]
    got = list(ref)
    if diverge:
        got[2] = Generation((*ref[2].tokens[:3], 999, *ref[2].tokens[4:]), ref[2].logprobs, ref[2].margins)
    r = evaluate(r, ref, ref, got, stand_in_used=True)
    return r


OPTIONS = PdEvalOptions(model="llama-3.1-8b", oracle="tokens", shrink=True, device="cpu")


def test_identical_tokens_under_retraction_pass_through_pd_evals_reporters() -> None:
    result = tokens.to_result(OPTIONS, "generic", _consistency())
    doc = assert_valid(pd_report.document(result), "pd-eval")
    assert (doc["verdict"], doc["exit_code"], doc["oracle"], doc["retractions"]) == ("pass", 0, "tokens", 5)
    assert doc["threshold"] is None and doc["launch_plan"]["bootstrap_port"] == 8998
    assert doc["tokens"]["identical"] == doc["tokens"]["total"] == 4
    assert pd_report.verdict_detail(result) == "4/4 requests identical, 5 retractions (12 s)"
    assert all(c.status == junit.PASSED for c in pd_report.junit_cases(result))


def test_a_divergence_is_red_and_named_everywhere() -> None:
    result = tokens.to_result(OPTIONS, "generic", _consistency(diverge=True))
    doc = assert_valid(pd_report.document(result), "pd-eval")
    assert (doc["verdict"], doc["exit_code"], doc["exit_reason"]) == ("fail", 1, "diverged")
    detail = pd_report.verdict_detail(result)
    assert "1/4 requests diverge" in detail and "first: request 2 at token 3 (5 → 999" in detail
    failed = [c.name for c in pd_report.junit_cases(result) if c.status == junit.FAILED]
    assert failed == ["tokens", "request-2"]
    assert {r.check: r.status for r in pd_report.summary_rows(result)}["tokens"] == "failed"


def test_a_pressured_decode_that_retracted_nothing_is_red() -> None:
    result = tokens.to_result(OPTIONS, "generic", _consistency(pressured=0))
    doc = assert_valid(pd_report.document(result), "pd-eval")
    assert (doc["exit_code"], doc["exit_reason"]) == (1, "no_teeth")
    assert "retracted nothing" in pd_report.verdict_detail(result)


def test_a_failed_deployment_leaves_no_green_case() -> None:
    c = ConsistencyResult(
        "llama-3.1-8b",
        "dense",
        "pd",
        "cpu",
        True,
        Workload().to_dict(),
        exit_reason="server_exited",
        message="decode-pressured exited with code 1",
    )
    result = tokens.to_result(OPTIONS, "generic", c)
    doc = assert_valid(pd_report.document(result), "pd-eval")
    assert (doc["verdict"], doc["exit_code"]) == ("error", 3)
    cases = pd_report.junit_cases(result)
    assert [(x.name, x.status) for x in cases] == [("deployment", junit.ERROR), ("tokens", junit.ERROR)]


def test_the_schema_holds_each_oracle_to_its_own_keys() -> None:
    tokens_doc = pd_report.document(tokens.to_result(OPTIONS, "generic", _consistency()))
    broken = {**tokens_doc, "tokens": {k: v for k, v in tokens_doc["tokens"].items() if k != "noise_floor"}}
    assert any("noise_floor" in e for e in errors(broken, "pd-eval"))  # the body is consistency's, checked
    assert errors({**tokens_doc, "tokens": None}, "pd-eval")
    gsm8k_like = {k: v for k, v in tokens_doc.items() if k not in ("oracle", "tokens")}
    assert any("threshold" in e for e in errors(gsm8k_like, "pd-eval"))  # GSM8K's threshold is a number


def test_an_unwritable_report_is_refused_before_anything_starts(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = tmp_path / "out"
    quits = "python -c 'raise SystemExit(3)'"  # were the preflight gone, the run would end at once, never exit 2
    args = ["--junit", str(blocker / "x.xml"), "--output-dir", str(out), "--timeout", "30"]
    run = invoke([*TOKENS, *args, "--launcher", quits, "--router-launcher", quits])
    assert run.exit_code == 2, run.output
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("kvdoctor: error: ")
    assert not out.exists()


def test_the_terminal_shows_each_gate_once(tmp_path: Path) -> None:
    """consistency's findings print above pd-eval's table, whose rows are the gates: no gate line is repeated."""
    import io

    from rich.console import Console

    from kvdoctor.cli.pd_eval import PdEvalRun

    result = tokens.to_result(OPTIONS, "generic", _consistency(diverge=True))
    result.run_dir = str(tmp_path)
    run = PdEvalRun.__new__(PdEvalRun)
    run.console, run.json_out, run.junit_path = Console(file=io.StringIO(), width=400), False, None
    run.deliver(result)
    out = run.console.file.getvalue()
    assert "request 2: identical for 3 tokens" in out  # consistency's findings are there
    assert "retractions: reference 0, pressured 5 (from metrics)" in out
    tokens_gate = next(g for g in result.gates if g.name == "tokens")
    assert out.count(tokens_gate.message) == 1, out  # the table's row, no "gate tokens: ..." line above it
    assert not [line for line in out.splitlines() if line.startswith("gate ")], out
