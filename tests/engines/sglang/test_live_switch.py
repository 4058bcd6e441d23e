"""A live retraction fault switched at run time (``drop-kv``: its record says ``switchable``): installed through
``Req.offload_kv_cache`` at the first armed backup, its restore skipped while armed and SGLang's own while disarmed,
and backups and restores counted only while armed, so a case measured after it on the same server is clean. Driven
on stand-in classes shaped as SGLang 0.5.23's ``Req`` and KV pool (the real servers: test_servers.py)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from kvdoctor.core import faults
from kvdoctor.core.faults import StatePath, Target
from kvdoctor.engines import arming, hook_log
from kvdoctor.engines.sglang import live_faults


class MHATokenToKVPool:
    def __init__(self) -> None:
        self.loaded: list[str] = []

    def load_cpu_copy(self, kv_cache_cpu: Any, indices: Any) -> None:
        self.loaded.append(kv_cache_cpu)


def _schedule_batch(kv: MHATokenToKVPool) -> tuple[ModuleType, SimpleNamespace]:
    """A stand-in ``schedule_batch`` module: ``Req`` backs up (a copy) and restores (through the pool)."""

    class Req:
        def offload_kv_cache(self, req_to_token_pool: Any, allocator: Any) -> None:
            self.copy = "backup"

        def load_kv_cache(self, req_to_token_pool: Any, allocator: Any) -> None:
            allocator.get_kvcache().load_cpu_copy(self.copy, [0])

    module = ModuleType("schedule_batch")
    module.Req = Req  # type: ignore[attr-defined]
    return module, SimpleNamespace(get_kvcache=lambda: kv)


def _retract_and_resume(module: ModuleType, allocator: Any) -> None:
    req = module.Req()  # type: ignore[attr-defined]
    req.offload_kv_cache(SimpleNamespace(), allocator)
    req.load_kv_cache(SimpleNamespace(), allocator)


def test_drop_kv_skips_the_restore_only_while_armed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log, armed = tmp_path / "hook.log", tmp_path / "armed"
    monkeypatch.setenv("KVDOCTOR_HOOK_LOG", str(log))
    monkeypatch.setenv("KVDOCTOR_ARM", str(armed))
    kv = MHATokenToKVPool()
    module, allocator = _schedule_batch(kv)
    (hook,) = live_faults.hooks("drop-kv").values()
    hook(module)
    arming.disarm(armed)
    _retract_and_resume(module, allocator)  # a control's burst: not installed, SGLang's own restore
    assert kv.loaded == ["backup"] and hook_log.read(log).count("fault-installed") == 0
    arming.arm(armed, "drop-kv")
    _retract_and_resume(module, allocator)  # the fault's burst: installed, the restore skipped
    assert kv.loaded == ["backup"]
    arming.disarm(armed)
    _retract_and_resume(module, allocator)  # a later case on the same server: SGLang's own restore again
    assert kv.loaded == ["backup", "backup"]
    events = hook_log.read(log)
    assert (events.count("fault-installed"), events.count("fault-offload"), events.count("fault-restore")) == (1, 1, 1)


def test_only_the_retraction_faults_that_switch_say_so() -> None:
    """A retraction fault that changes a pool's attribute or carries a restore over cannot be switched off."""
    live = faults.select(server="sglang", target=Target.SERVER, path=StatePath.RETRACTION)
    assert {f.name for f in live if f.switchable} == {"drop-kv", "retract-raise"}
    assert {f.name for f in live} >= {"missing-mamba", "restore-order", "drop-swa"}
