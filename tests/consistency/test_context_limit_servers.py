"""The context limit against a real SGLang 0.5.23 (``make test-server``, in .venv-server/; ~2 minutes): the longest
request kvdoctor takes runs whole on the real servers, one token more is exit 2 before anything starts (issue 28,
defect 6: it was exit 3 after a 61 s launch, SGLang's HTTP 400), and kvdoctor's context is SGLang's own
``ModelConfig.context_len`` for the checkpoint the servers load. ``--context-length`` after ``--`` keeps the
requests short (a shrunk Llama's own context is 4,096)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvdoctor.consistency import context_limit

pytestmark = [pytest.mark.server, pytest.mark.matrix]  # make consistency-matrix; CI's budget (issue 44)

CONTEXT = 128
NEW = 32
LONGEST = CONTEXT - context_limit.SGLANG_SCHEDULER_RESERVE  # prompt + new tokens SGLang serves whole
TIMEOUT_S = 900


def consistency(out: Path, prompt_tokens: int) -> subprocess.CompletedProcess[str]:
    kvdoctor = Path(sys.executable).with_name("kvdoctor")
    argv = [str(kvdoctor), "consistency", "llama-3.1-8b", "--shrink", "--device", "cpu", "--json", "--output-dir",
            str(out), "--requests", "2", "--concurrency", "2", "--prompt-tokens", str(prompt_tokens),
            "--max-new-tokens", str(NEW), "--", "--context-length", str(CONTEXT)]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


def sglang_context_len(model_dir: str, context_length: int | None) -> int:
    """SGLang's own ``ModelConfig(...).context_len`` for MODEL_DIR (its derivation, in a child: SGLang is imported
    only by the servers and kvdoctor/engines)."""
    code = (
        "import sys; from sglang.srt.configs.model_config import ModelConfig; "
        f"print(ModelConfig({model_dir!r}, context_length={context_length!r}).context_len)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout.strip().splitlines()[-1])


def test_the_longest_request_runs_whole_on_sglang_and_one_more_is_refused_before_launch(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = consistency(out, LONGEST - NEW)
    sys.stderr.write(done.stderr[-4000:])
    doc = json.loads(done.stdout)
    assert done.returncode in (0, 1) and doc["exit_code"] in (0, 1), doc["message"]  # the servers served it
    assert doc["total"] == 2 and doc["survivors"] == []
    # SGLang cuts max_new_tokens past the limit: at it, a request gets every token it asked for
    assert max(r["ref_tokens"] for r in doc["requests"]) == NEW
    assert max(r["got_tokens"] for r in doc["requests"]) == NEW
    # kvdoctor's context is SGLang's, for the checkpoint the servers loaded (with and without --context-length)
    assert sglang_context_len(doc["model_dir"], CONTEXT) == CONTEXT
    loaded = json.loads((Path(doc["model_dir"]) / "config.json").read_text())
    derived = context_limit.sglang(loaded, doc["model_dir"], ()).tokens + context_limit.SGLANG_SCHEDULER_RESERVE
    assert sglang_context_len(doc["model_dir"], None) == derived

    runs = sorted(out.glob("run-*"))
    refused = consistency(out, LONGEST - NEW + 1)
    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "is longer than sglang serves whole" in lines[0]
    assert sorted(out.glob("run-*")) == runs, "no run directory: nothing launched"
