"""``--fault-file`` over real SGLang PD (``make consistency-matrix``, in .venv-server/; minutes, kept out of CI's
chosen few, whose single-server fault-file run checks the record): a user's fault on the
decode's restore is the fault's, never an SGLang finding (issue 43, item 20), and a fault file given through a
symlink is armed under the name its servers log (item 11).

The fault file (written by the test, given through a symlink of another name) wraps the pressured decode's
``Req.load_kv_cache`` (``srt/managers/schedule_batch.py``) and zeroes the restored request's recurrent state right
after SGLang loaded it. Shrunk LFM2, ``--topology pd`` with the overlap schedule off (without a fault the run is then
identical: ``test_servers.py::test_lfm2_pd_without_the_overlap_schedule_is_identical``), so every disagreement the
state trace names is the fault's: the finding must say so (``injected``, ``injected_by: --fault-file``) and cite none
of SGLang's lines, and the result carries the file's record (each wrap installed, fired, from the hook log).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kvdoctor.engines import hook_log

pytestmark = [pytest.mark.server, pytest.mark.matrix]

TARGET = "sglang.srt.managers.schedule_batch:Req.load_kv_cache"
FAULT = f'''"""Zero a restored request's recurrent state right after the PD decode loaded it back."""

from kvdoctor.engines import faultkit


@faultkit.wrap("{TARGET}", role="decode")
def zero_on_restore(original, req, req_to_token_pool, *args, **kwargs):
    out = original(req, req_to_token_pool, *args, **kwargs)
    mamba = getattr(req_to_token_pool, "mamba_pool", None)
    idx = getattr(getattr(req, "kv", None), "mamba_pool_idx", None)
    if mamba is None or idx is None:
        faultkit.unchanged("no recurrent state")
        return out
    import torch

    slots = req_to_token_pool.translate_mamba_indices(idx.reshape(1).to(torch.int64)).to(torch.int64)
    cache = mamba.mamba_cache
    for state in [*cache.conv, cache.temporal]:
        if state is not None and state.numel():
            state[:, slots] = 0
    faultkit.note(f"zeroed the state of {{req.rid}} (slot {{slots.tolist()}})")
    return out
'''
WORKLOAD = ("--requests", "8", "--prompt-tokens", "16", "--max-new-tokens", "32", "--concurrency", "8")
TIMEOUT_S = 900


def consistency(out: Path, *args: str) -> tuple[int, dict[str, Any]]:
    kvdoctor = Path(sys.executable).with_name("kvdoctor")
    argv = [
        str(kvdoctor),
        "consistency",
        "lfm2-1.2b",
        "--shrink",
        "--device",
        "cpu",
        "--json",
        "--output-dir",
        str(out),
    ]
    done = subprocess.run(
        [*argv, *WORKLOAD, "--timeout", str(TIMEOUT_S), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S + 60,
        check=False,
    )
    sys.stderr.write(done.stderr[-4000:])
    assert done.stdout, done.stderr[-2000:]
    return done.returncode, json.loads(done.stdout)


def test_a_fault_file_on_the_pd_decodes_restore_is_the_faults_not_sglangs(tmp_path: Path) -> None:
    real = tmp_path / "faults" / "zero_on_restore.py"
    real.parent.mkdir()
    real.write_text(FAULT, encoding="utf-8")
    link = tmp_path / "current.py"
    os.symlink(real, link)
    out = Path(os.environ.get("KVDOCTOR_CONSISTENCY_OUT", str(tmp_path / "out")))
    code, doc = consistency(out, "--topology", "pd", "--fault-file", str(link), "--", "--disable-overlap-schedule")
    gates = {g["name"]: g for g in doc["gates"]}
    assert gates["fault-fired"]["passed"], gates["fault-fired"]["message"]  # armed under the name the server logs
    assert gates["fault-fired"]["message"].startswith(f"fault file zero_on_restore fired: {TARGET} (decode) ")
    record = doc["fault_file"]
    assert (record["name"], record["path"], record["given"]) == ("zero_on_restore", str(real.resolve()), str(link))
    (wrap,) = record["wraps"]
    assert (wrap["target"], wrap["role"], wrap["installed"]) == (TARGET, "decode", True) and wrap["fired"] > 0
    assert record["loaded"] >= 1 and record["refused"] is None and doc["fault"] is None
    assert doc["retractions"]["pressured"] > 0 and doc["bundle"] is None  # the fault's red is no SGLang bundle
    assert code == 1 and doc["exit_reason"] in ("diverged", "logprob_drift"), doc["message"]
    trace = doc["state_trace"]
    finding = trace["finding"]
    assert finding and (finding["injected"], finding["injected_by"]) == ("zero_on_restore", "--fault-file"), finding
    assert finding["cite"] == [] and all(k["cite"] == [] for k in finding["kinds"]), finding
    assert finding["sentence"].startswith("the fault's: your --fault-file zero_on_restore was installed")
    assert all(r["cite"] == [] for r in trace["requests"]), trace["requests"]
    log = hook_log.read(Path(doc["run_dir"]) / "site-hook.log")
    loaded = log.details("fault-file-loaded")
    assert loaded and all(line.split(" ")[0] == "zero_on_restore" for line in loaded)
    assert log.count("fault-refused", "fault-unresolved", "hook-failed") == 0
