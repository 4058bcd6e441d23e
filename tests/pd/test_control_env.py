"""kvdoctor owns the environment variables its in-server code reads: one inherited from kvdoctor's own
environment (``KVDOCTOR_INJECT`` exported in a shell or a CI job) never reaches a server, and the run names it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import kvdoctor
from kvdoctor.deploy.supervisor import RUN_MARKER_ENV, Supervisor
from kvdoctor.engines import hook_log
from kvdoctor.engines.hook_log import CONTROL_ENV

ENGINES = Path(kvdoctor.__file__).parent / "engines"
DUMP_ENV = "import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'))"
LEAKED = {
    "KVDOCTOR_INJECT": "drop-kv",
    "KVDOCTOR_PATCHES": "mooncake-host-indices",
    "KVDOCTOR_DIGEST_LOG": "/somewhere/else.jsonl",
    "KVDOCTOR_HOOK_LOG": "/somewhere/else.log",
    "KVDOCTOR_VLLM_INJECT": "drop-kv",
    "KVDOCTOR_STANDIN_LOG": "/somewhere/else-calls.log",
}


def _server_env(supervisor: Supervisor, tmp_path: Path, step_env: dict[str, str]) -> dict[str, str]:
    """The environment a process started by SUPERVISOR (with its step's STEP_ENV) really had."""
    out = tmp_path / "env.json"
    proc = supervisor.start("server", ("python", "-c", DUMP_ENV, str(out)), step_env)
    assert proc.popen.wait(timeout=60) == 0, proc.log_path.read_text()
    env: dict[str, str] = json.loads(out.read_text())
    return env


def test_an_inherited_control_variable_never_reaches_a_server(tmp_path: Path, no_leftovers: str) -> None:
    inherited = {"PATH": "/usr/bin:/bin", "KVDOCTOR_STANDIN_DECODE_CRASH_AFTER": "5", **LEAKED}
    inherited[RUN_MARKER_ENV] = "a-stale-run"
    step = {"KVDOCTOR_HOOK_LOG": str(tmp_path / "site-hook.log"), "KVDOCTOR_PATCHES": "mooncake-host-indices"}
    with Supervisor(tmp_path / "logs", base_env=inherited) as supervisor:
        env = _server_env(supervisor, tmp_path, step)
    assert not {"KVDOCTOR_INJECT", "KVDOCTOR_DIGEST_LOG", "KVDOCTOR_VLLM_INJECT", "KVDOCTOR_STANDIN_LOG"} & set(env)
    assert {k: env[k] for k in step} == step  # what the step sets, the step's value
    assert env["KVDOCTOR_STANDIN_DECODE_CRASH_AFTER"] == "5" and env["PATH"] == "/usr/bin:/bin"  # not kvdoctor's
    assert env[RUN_MARKER_ENV] == supervisor.run_id
    assert supervisor.dropped_env == sorted(LEAKED)
    (warning,) = supervisor.warnings
    assert all(name in warning for name in LEAKED) and "--inject" in warning


def test_kvdoctors_own_environment_is_read_when_no_base_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leftovers: str
) -> None:
    monkeypatch.setenv("KVDOCTOR_INJECT", "drop-kv")
    with Supervisor(tmp_path / "logs") as supervisor:
        env = _server_env(supervisor, tmp_path, {})
    assert "KVDOCTOR_INJECT" not in env and supervisor.dropped_env == ["KVDOCTOR_INJECT"]


def test_nothing_to_say_when_nothing_was_inherited(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path, base_env={"PATH": "/bin", "KVDOCTOR_STANDIN_ANSWER": "4"})
    assert supervisor.dropped_env == [] and supervisor.warnings == []


def test_every_variable_the_in_server_code_reads_is_a_control_variable() -> None:
    """A new ``KVDOCTOR_*`` read inside a server must be listed, or an exported one would leak into servers."""
    read = set()
    for path in ENGINES.rglob("*.py"):
        read |= set(re.findall(r"[\"'](KVDOCTOR_[A-Z0-9_]+)[\"']", path.read_text(encoding="utf-8")))
    assert read == CONTROL_ENV  # none missing, none stale


def test_a_fault_in_either_servers_log_is_found() -> None:
    sglang = ["11 patched MooncakeKVSender.x=False", "11 fault-armed drop-kv on Req.offload_kv_cache"]
    vllm_asked = ["12 loaded drop-kv"]
    vllm_idle = ["12 loaded -", "13 loaded -"]
    assert hook_log.faults(sglang) == ["fault-armed drop-kv on Req.offload_kv_cache"]
    assert hook_log.faults(vllm_asked) == ["loaded drop-kv"]
    assert hook_log.faults(vllm_idle) == [] and hook_log.faults(["11 digests-armed x", ""]) == []
