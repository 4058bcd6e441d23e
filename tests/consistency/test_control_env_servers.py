"""Real SGLang 0.5.23 servers (``-m server``, in .venv-server/): kvdoctor owns its servers' control variables and
runs the user's own ``sitecustomize`` on PD servers too (issue 28, defects 1 and 13).

One shrunk Llama PD run, as a CI job would start it: ``KVDOCTOR_INJECT=drop-kv`` (and the other in-server
control variables) exported in the environment, no ``--inject``, and a ``sitecustomize`` of the user's on
``PYTHONPATH`` that writes each process's command line to a file. Before the fixes the exported fault ran in
the pressured decode and the report blamed SGLang's ``load_kv_cache`` (exit 1), and the PD servers never ran the
user's file (kvdoctor's site hook shadowed it). Now: green and identical, the dropped variables named in a
warning, and every server ran the user's file.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.consistency.test_servers import assert_clean, consistency

pytestmark = [pytest.mark.server, pytest.mark.matrix]  # make consistency-matrix; CI's budget (issue 44)

USER_SITECUSTOMIZE = 'import os, sys\nopen(os.environ["KVD_USER_MARK"], "a").write(" ".join(sys.orig_argv) + "\\n")\n'
EXPORTED = {"KVDOCTOR_INJECT": "drop-kv", "KVDOCTOR_PATCHES": "nonsense", "KVDOCTOR_VLLM_INJECT": "drop-kv"}


def test_llama_pd_ignores_an_exported_fault_and_runs_the_users_sitecustomize(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = tmp_path / "user-site"
    user.mkdir()
    (user / "sitecustomize.py").write_text(USER_SITECUSTOMIZE)
    mark = tmp_path / "user-sitecustomize.log"
    for name, value in EXPORTED.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("KVD_USER_MARK", str(mark))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(user), os.environ.get("PYTHONPATH", "")]).rstrip(":"))
    code, doc = consistency(tmp_path / "out", "llama-3.1-8b", "--topology", "pd")
    assert code == 0 and doc["exit_reason"] == "passed", doc["message"]
    assert doc["fault"] is None and doc["identical"] == doc["total"] == 16
    assert doc["retractions"]["pressured"] > 0  # the path the exported fault would have broken did run
    assert_clean(doc)
    assert not (doc["state_trace"]["finding"] or {}).get("cite"), "a finding blames SGLang"
    (warning,) = [w for w in doc["warnings"] if "KVDOCTOR_INJECT" in w]
    assert all(name in warning for name in EXPORTED)
    ran = mark.read_text().splitlines()
    servers = [s for s in doc["deployment"]["steps"] if "sglang.launch_server" in s["argv"]]
    assert len(servers) == 3, doc["deployment"]["steps"]
    for step in servers:  # prefill and both decodes: kvdoctor's site hook first, the user's file still ran
        port = step["argv"][step["argv"].index("--port") + 1]
        assert step["env"]["PYTHONPATH"].split(os.pathsep)[0].endswith("site_hook"), step["env"]["PYTHONPATH"]
        assert any("sglang.launch_server" in line and f"--port {port}" in line for line in ran), (step["role"], ran)
    sys.stderr.write(f"user sitecustomize ran in {len(ran)} processes\n")
