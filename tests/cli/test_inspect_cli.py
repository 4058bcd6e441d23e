"""`kvdoctor inspect` end to end, through the real console script in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

INKLING = ["inkling-small", "--kv-cache-dtype", "mxfp8", "--disaggregation-mode", "decode", "--page-size", "128"]


def kvdoctor(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "kvdoctor", *args], capture_output=True, text=True, timeout=60, check=False, env=env
    )


def test_inkling_mxfp8_decode_report() -> None:
    out = kvdoctor("inspect", *INKLING, "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    names = {c["name"]: c for c in report["components"]}
    assert set(names) == {"full_kv", "full_kv_scales", "swa_kv", "swa_kv_scales", "conv_state"}
    assert names["conv_state"]["pool"] == "MambaPool" and "bytes_per_request" in names["conv_state"]
    assert names["swa_kv"]["pool"] == "MHATokenToKVPoolMXFP8" and "bytes_per_token" in names["swa_kv"]
    assert report["kv_pool"] == "SWAKVPool"
    assert report["uses_ssm_state"] is True
    assert report["cpu_copy_carries_mamba"] is False
    backup = report["retraction_backup"]
    assert (backup["backend"], backup["applies"], backup["hicache_ratio"]) == ("cpu_tensor", True, 2.0)
    failed = [r["name"] for r in backup["reasons"] if not r["passed"]]
    assert failed == ["no_recurrent_state"]
    assert report["pd_state_types"] == ["SWA", "BLOCK_SCALE", "BLOCK_SCALE_SWA", "MAMBA"]
    assert report["rules_revision"].startswith("sglang==0.5.23")
    assert all(h["severity"] != "error" for h in report["hazards"])


def test_host_pool_on_inkling_is_an_error_hazard_and_fails_under_strict() -> None:
    flags = [*INKLING, "--disaggregation-decode-retraction-backup", "host_pool"]
    lenient = kvdoctor("inspect", *flags, "--json")
    assert lenient.returncode == 0
    codes = [h["code"] for h in json.loads(lenient.stdout)["hazards"] if h["severity"] == "error"]
    assert codes == ["KVD014-SGLANG-REFUSES", "KVD001-SSM-ON-HOST-POOL"]  # SGLang refuses; KVD001 says why
    strict = kvdoctor("inspect", *flags, "--strict")
    assert strict.returncode == 1
    assert "KVD001-SSM-ON-HOST-POOL" in strict.stdout
    assert kvdoctor("inspect", *INKLING, "--strict").returncode == 0


def test_table_output_names_the_decision() -> None:
    out = kvdoctor("inspect", *INKLING)
    assert out.returncode == 0
    for text in ("SWAKVPool", "cpu_tensor", "conv_state", "BLOCK_SCALE_SWA", "no_recurrent_state"):
        assert text in out.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["inspect", "{tmp}/broken.json"], "malformed JSON"),
        (["inspect", "{tmp}/missing.json"], "no such file"),
        (["inspect", "{tmp}/notype.json"], "'model_type' is missing"),
        (["inspect", "{tmp}/unknown.json"], "is not one SGLang knows"),
        (["inspect", "inkling-small", "--swa-full-tokens-ratio", "2"], "must be in (0, 1]"),
        (["inspect", "inkling-small", "--max-total-tokens", "-1"], "must be a positive integer"),
        (["inspect", "{tmp}/badfield.json"], "field 'head_dim' must be a whole number, got 'x'"),
        (["inspect", "foo/bar baz"], "no such file"),  # not a valid Hub repo id either
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "notype.json").write_text("{}")
    (tmp_path / "unknown.json").write_text('{"model_type": "frob", "architectures": ["Frob"]}')
    llama = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "hidden_size": 64,
        "head_dim": "x",
    }
    (tmp_path / "badfield.json").write_text(json.dumps(llama))
    out = kvdoctor(*[a.format(tmp=tmp_path) for a in args])
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_a_launch_sglang_refuses_is_kvd014_and_fails_only_under_strict() -> None:
    args = [
        "inspect",
        "inkling-small",
        "--disaggregation-mode",
        "prefill",
        "--disaggregation-decode-retraction-backup",
        "host_pool",
    ]
    out = kvdoctor(*args)
    assert out.returncode == 0, out.stderr
    assert "KVD014-SGLANG-REFUSES" in out.stdout and "only supported on a PD decode server" in out.stdout
    assert "SWAKVPool" in out.stdout  # the rest of the analysis is still shown
    assert kvdoctor(*args, "--strict").returncode == 1


def test_inspect_never_imports_torch_or_triton() -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from kvdoctor.cli.app import app\n"
        "r = CliRunner().invoke(app, ['inspect', 'inkling-small', '--json'])\n"
        "assert r.exit_code == 0, r.output\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
