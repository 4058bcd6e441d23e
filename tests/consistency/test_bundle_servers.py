"""The overlap finding's reproduction bundle, run with kvdoctor not importable (``make consistency-matrix``).

``kvdoctor consistency lfm2-1.2b --shrink --topology pd --bundle DIR`` on real SGLang 0.5.23 servers is red (the
overlap finding) and proves it from the state's bytes: every backup equals the reference decode's state one position
past its KV, every resumed forward fed that position again. Its bundle's ``run.py`` is then run by the server env's
Python with a ``kvdoctor`` on ``PYTHONPATH`` that refuses to import (so neither the client nor any server it launches
can use kvdoctor): red as the bundle ships, green with ``-- --disable-overlap-schedule``, retractions counted both
times.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.consistency.test_servers import TIMEOUT_S

# Three PD deployments (about 9 minutes), one of CI's chosen few: the finding's reproduction is what a maintainer runs.
pytestmark = pytest.mark.server

WORKLOAD = ("--requests", "16", "--prompt-tokens", "16", "--max-new-tokens", "48", "--concurrency", "16")


@pytest.fixture(scope="module")
def finding(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    out = tmp_path_factory.mktemp("finding")
    dest = out / "bundle"
    kvdoctor = Path(sys.executable).with_name("kvdoctor")
    argv = [str(kvdoctor), "consistency", "lfm2-1.2b", "--shrink", "--topology", "pd", *WORKLOAD]
    argv += ["--json", "--output-dir", str(out), "--bundle", str(dest)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S + 60, check=False)
    sys.stderr.write(done.stderr[-4000:])
    assert done.stdout, done.stderr[-2000:]
    return json.loads(done.stdout), dest


def _without_kvdoctor(tmp_path: Path) -> dict[str, str]:
    blocker = tmp_path / "blocker" / "kvdoctor"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('kvdoctor is not importable in this test')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVDOCTOR_")}
    env["PYTHONPATH"] = str(blocker.parent)
    # From a folder outside the checkout: `python -c` and `python -m` put the working directory first on sys.path.
    probe = subprocess.run(
        [sys.executable, "-c", "import kvdoctor"], env=env, cwd=tmp_path, capture_output=True, check=False
    )
    assert probe.returncode != 0 and b"not importable" in probe.stderr
    return env


def _run(bundle: Path, env: dict[str, str], *flags: str) -> tuple[int, str, dict[str, Any]]:
    argv = [sys.executable, str(bundle / "run.py"), *(["--", *flags] if flags else [])]
    # Run from the bundle's own folder, as a maintainer would: the servers' `python -m` puts it first on sys.path.
    done = subprocess.run(argv, env=env, cwd=bundle, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    sys.stderr.write(done.stderr[-3000:])
    return done.returncode, done.stdout, json.loads((bundle / "result.json").read_text())


def test_the_finding_is_red_and_proven_from_the_state_s_bytes(finding: tuple[dict[str, Any], Path]) -> None:
    doc, dest = finding
    assert doc["exit_code"] == 1 and doc["bundle"] == str(dest), doc["message"]
    assert doc["retractions"]["pressured"] > 0
    sb = doc["state_trace"]["state_bytes"]
    # A request's first backup is on the reference's path, so its position is named exactly; a later one follows a
    # double feed that already moved the state off that path (named as the nearest, not asserted).
    firsts = [r["cycles"][0] for r in sb["requests"] if r["cycles"]]
    assert sb["kept"] and firsts
    for c in firsts:
        assert c["backup"]["pos"] == c["kv_tokens"] + 1 and c["backup"]["at"]["kv"] > sb["floor"], c["sentence"]
        assert c["fed"] == c["kv_tokens"] and c["double_feed"] is True and c["seed"] is not None, c["sentence"]
    assert (dest / "ISSUE.md").read_text().count("--disable-overlap-schedule") >= 2


def test_the_bundle_reproduces_it_without_kvdoctor_and_the_workaround_is_green(
    finding: tuple[dict[str, Any], Path], tmp_path: Path
) -> None:
    _, dest = finding
    env = _without_kvdoctor(tmp_path)
    code, out, result = _run(dest, env)
    assert code == 1 and "REPRODUCED" in out, out
    assert result["retractions"] and result["retractions"] > 0
    code, out, result = _run(dest, env, "--disable-overlap-schedule")
    assert code == 0 and "identical to the reference" in out, out
    assert result["retractions"] and result["retractions"] > 0  # green for the right reason: the path ran
    assert not (dest / "logs" / "stand-in-calls.log").exists() or not (dest / "logs" / "stand-in-calls.log").read_text()
