"""``pd-eval --oracle tokens`` on real SGLang 0.5.23 servers on this CPU (``make consistency-matrix``; minutes).

pd-eval's own PD deployment (the generic preset, the mini-lb router) judged by consistency's token oracle: a
shrunk Llama identical under forced retraction (green, retractions > 0, the reference none), and red with the
KV dropped on restore inside the pressured decode, the first divergence named in the verdict. Marked ``matrix``:
kept out of CI's chosen few (``make test-server``), whose Llama PD runs cover the same oracle through
``kvdoctor consistency``. Measured here: ~6 minutes a run on 2 shared cores (prefill ~210 s to healthy).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.server, pytest.mark.matrix]

# The workload of test_servers.py's Llama PD runs, in pd-eval's words (--num-questions prompts, --parallel).
WORKLOAD = ("--num-questions", "16", "--prompt-tokens", "16", "--max-new-tokens", "48", "--parallel", "16")
TIMEOUT_S = 900


def pd_eval(out: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    kvdoctor = Path(sys.executable).with_name("kvdoctor")
    argv = [str(kvdoctor), "pd-eval", "llama-3.1-8b", "--oracle", "tokens", "--shrink", "--device", "cpu"]
    argv += ["--mini-lb", "--timeout", str(TIMEOUT_S), "--output-dir", str(out), *WORKLOAD, *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S + 60, check=False)
    sys.stderr.write(done.stderr[-4000:])
    assert done.stdout, done.stderr[-2000:]
    newest = max(out.glob("run-*"), key=lambda p: p.stat().st_mtime)  # the module's runs share OUT
    doc: dict[str, Any] = json.loads((newest / "result.json").read_text())
    return done.returncode, doc, verdict_text(done.stdout)


def verdict_text(stdout: str) -> str:
    """The one verdict line on stdout (the report's stream; with --json there is none, the JSON's verdict is it),
    its fold at the console's 80 columns undone."""
    lines = stdout.rstrip("\n").splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("verdict:")]
    assert len(starts) == 1, stdout[-2000:]
    return " ".join(line.strip() for line in lines[starts[0] :])


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(os.environ.get("KVDOCTOR_CONSISTENCY_OUT", str(tmp_path_factory.mktemp("pd-eval-tokens"))))


def test_pd_evals_deployment_is_token_identical_under_forced_retraction(out: Path) -> None:
    code, doc, verdict = pd_eval(out)
    assert code == 0, doc["message"]
    assert doc["oracle"] == "tokens" and doc["verdict"] == "pass" and doc["retractions"] > 0
    t = doc["tokens"]
    assert t["retractions"] == {"reference": 0, "pressured": doc["retractions"]}
    assert t["identical"] == t["total"] == 16 and t["stand_in"]["calls"] == [] and t["survivors"] == []
    assert verdict.startswith("verdict: passed — 16/16 requests identical")


def test_pd_evals_deployment_with_the_kv_dropped_on_restore_is_red(out: Path) -> None:
    code, doc, verdict = pd_eval(out, "--inject", "drop-kv")
    assert code == 1 and doc["exit_reason"] == "diverged", doc["message"]
    t = doc["tokens"]
    assert t["fault"]["installed"] and t["fault"]["backups"] > 0 and t["fault"]["restores"] > 0
    assert t["identical"] < t["total"] and doc["retractions"] > 0
    first = min(
        (r for r in t["requests"] if r["diverged"] and not r["within_noise"]), key=lambda r: (r["position"], r["index"])
    )
    assert f"first: request {first['index']} at token {first['position']}" in verdict
