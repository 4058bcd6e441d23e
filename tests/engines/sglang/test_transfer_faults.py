"""The PD transfer's faults and observer (``kvdoctor.engines.sglang.transfer_faults``) and ``retract-raise``
(``live_faults``), driven on stand-in classes shaped as SGLang 0.5.23's: no SGLang needed. Each fault fires only
while armed and logs each firing; the observer wraps the fault, so it counts the calls the fault faked."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from kvdoctor.core import faults
from kvdoctor.engines import arming, hook_log
from kvdoctor.engines.sglang import live_faults, server_hooks, transfer_faults


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "hook.log"
    monkeypatch.setenv("KVDOCTOR_HOOK_LOG", str(path))
    monkeypatch.delenv("KVDOCTOR_ARM", raising=False)
    return path


def _conn() -> tuple[ModuleType, list[str]]:
    """A stand-in for ``srt/disaggregation/mooncake/conn.py``: its manager's two sends, each recording the call."""
    calls: list[str] = []

    class MooncakeKVManager:
        kv_args = SimpleNamespace(state_types=["mamba"])

        def maybe_send_extra(self, req: Any, prefill_state_indices: Any, executor: Any, info: Any = None) -> int:
            calls.append(f"state {req.room}")
            return 0

        def send_aux(self, req: Any, prefill_aux_index: int, dst_aux_ptrs: list[int]) -> int:
            calls.append(f"aux {req.room}")
            return 0

    module = ModuleType("conn")
    module.MooncakeKVManager = MooncakeKVManager  # type: ignore[attr-defined]
    return module, calls


def test_drop_pd_state_reports_success_without_sending_while_armed(log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module, calls = _conn()
    (hook,) = transfer_faults.drop_pd_state("drop-pd-state").values()
    hook(module)
    manager = module.MooncakeKVManager()  # type: ignore[attr-defined]
    assert manager.maybe_send_extra(SimpleNamespace(room=7), [[3]], None) == 0
    assert calls == []  # nothing sent
    events = hook_log.read(log)
    assert events.details("fault-fired") == ["drop-pd-state room=7 state_types=1 sent=0"]
    assert events.count("fault-installed") == 1
    armed = log.with_name("armed")
    monkeypatch.setenv("KVDOCTOR_ARM", str(armed))
    arming.disarm(armed)  # the reference's burst: SGLang's own send runs
    assert manager.maybe_send_extra(SimpleNamespace(room=8), [[3]], None) == 0
    assert calls == ["state 8"] and hook_log.read(log).count("fault-fired") == 1


def test_the_observer_wraps_the_fault_and_counts_every_request(log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed the way a server installs it (KVDOCTOR_INJECT, KVDOCTOR_PATCHES), the observer is outermost."""
    module, calls = _conn()
    monkeypatch.setenv("KVDOCTOR_INJECT", "drop-pd-state")
    monkeypatch.setenv("KVDOCTOR_PATCHES", transfer_faults.OBSERVER)
    monkeypatch.delenv("KVDOCTOR_DIGEST_LOG", raising=False)
    server_hooks.install()
    finder = sys.meta_path.pop(0)
    assert isinstance(finder, server_hooks.AfterImport)
    assert set(finder.hooks) == {server_hooks.MOONCAKE_MODULE, transfer_faults.DECODE_MODULE}
    finder.hooks[server_hooks.MOONCAKE_MODULE](module)
    manager = module.MooncakeKVManager()  # type: ignore[attr-defined]
    for room in (1, 2):
        manager.maybe_send_extra(SimpleNamespace(room=room), [[room]], None)
        manager.send_aux(SimpleNamespace(room=room), 0, [])
    assert calls == ["aux 1", "aux 2"]  # the state never left
    events = hook_log.read(log)
    assert events.details("transfer-state") == ["room=1 rc=0", "room=2 rc=0"]
    assert events.details("transfer-sent") == ["room=1 rc=0", "room=2 rc=0"]
    assert events.count("fault-fired") == 2


class _Pool:
    """A stand-in decode ReqToTokenPool: its mamba pool's clears, and the logical-to-physical translation."""

    def __init__(self) -> None:
        self.cleared: list[list[int]] = []
        self.mamba_pool = SimpleNamespace(clear_slots=lambda idx: self.cleared.append(idx.tolist()))

    def translate_mamba_indices(self, indices: Any) -> Any:
        return indices + 100


def _decode(pool: _Pool) -> ModuleType:
    class DecodeTransferQueue:
        def __init__(self) -> None:
            self.scheduler = SimpleNamespace(req_to_token_pool=pool)

        def _commit_transfer_to_req(self, decode_req: Any) -> None:
            decode_req.req.kv.mamba_needs_clear = False  # what sglang#32995's fix does

    module = ModuleType("decode")
    module.DecodeTransferQueue = DecodeTransferQueue  # type: ignore[attr-defined]
    return module


def _request(room: int, slot: int, aborted: bool = False) -> Any:
    import torch

    abort = type("FINISH_ABORT", (), {})() if aborted else None
    kv = SimpleNamespace(mamba_pool_idx=torch.tensor(slot), mamba_needs_clear=True)
    return SimpleNamespace(req=SimpleNamespace(bootstrap_room=room, kv=kv, finished_reason=abort))


def test_clear_pd_state_clears_the_transferred_state_after_the_commit(
    log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = _Pool()
    module = _decode(pool)
    (hook,) = transfer_faults.clear_pd_state("clear-pd-state").values()
    hook(module)
    queue = module.DecodeTransferQueue()  # type: ignore[attr-defined]
    done = _request(5, 3)
    queue._commit_transfer_to_req(done)
    assert pool.cleared == [[103]]  # the physical slot, as the consumer's clear translates it
    assert done.req.kv.mamba_needs_clear is False
    queue._commit_transfer_to_req(_request(6, 4, aborted=True))  # an aborted commit has no state to clear
    armed = log.with_name("armed")
    monkeypatch.setenv("KVDOCTOR_ARM", str(armed))
    arming.disarm(armed)
    queue._commit_transfer_to_req(_request(7, 5))
    assert pool.cleared == [[103]]
    assert hook_log.read(log).details("fault-fired") == ["clear-pd-state room=5 slot=3"]


def test_the_observer_counts_only_commits_that_kept_their_request(log: Path) -> None:
    module = _decode(_Pool())
    transfer_faults.observer_hooks()[transfer_faults.DECODE_MODULE](module)
    queue = module.DecodeTransferQueue()  # type: ignore[attr-defined]
    queue._commit_transfer_to_req(_request(1, 0))
    queue._commit_transfer_to_req(_request(2, 1, aborted=True))
    assert hook_log.read(log).details("transfer-committed") == ["room=1"]


def test_each_transfer_fault_is_installed_by_the_function_its_record_names() -> None:
    for name in ("drop-pd-state", "clear-pd-state"):
        record = faults.get(name, server="sglang", target=faults.Target.SERVER)
        assert record.impl == f"{transfer_faults.__name__}:{name.replace('-', '_')}"
    assert set(server_hooks.fault_hooks("drop-pd-state")) == {server_hooks.MOONCAKE_MODULE}
    assert set(server_hooks.fault_hooks("clear-pd-state")) == {transfer_faults.DECODE_MODULE}
    with pytest.raises(KeyError):
        server_hooks.fault_hooks("clobber-padding")  # no live server's fault


def test_retract_raise_raises_at_the_first_armed_cpu_copy(log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sglang#33385: the pool has no CPU copy; the decode scheduler dies at its first retraction backup."""

    class MHATokenToKVPool:
        def get_cpu_copy(self, indices: Any, mamba_indices: Any = None, req_pool_index: Any = None) -> str:
            return "copied"

    kv = MHATokenToKVPool()
    allocator = SimpleNamespace(get_kvcache=lambda: kv)
    live_faults.install("retract-raise", SimpleNamespace(), allocator)
    armed = log.with_name("armed")
    monkeypatch.setenv("KVDOCTOR_ARM", str(armed))
    arming.disarm(armed)
    assert kv.get_cpu_copy([1, 2]) == "copied"  # disarmed: SGLang's own copy
    arming.arm(armed, "retract-raise")
    with pytest.raises(NotImplementedError, match="MHATokenToKVPool does not support get_cpu_copy"):
        kv.get_cpu_copy([1, 2])
    assert hook_log.read(log).details("fault-fired") == [
        "retract-raise MHATokenToKVPool.get_cpu_copy raises NotImplementedError"
    ]


@pytest.mark.sglang
def test_the_wrapped_methods_exist_in_the_installed_sglang_with_the_arguments_the_wrappers_read() -> None:
    """Every method the transfer faults and the observer wrap, with the parameters they read, in SGLang itself."""
    import importlib
    import inspect

    conn = importlib.import_module(server_hooks.MOONCAKE_MODULE)
    decode = importlib.import_module(transfer_faults.DECODE_MODULE)
    params = {
        "maybe_send_extra": inspect.signature(conn.MooncakeKVManager.maybe_send_extra).parameters,
        "send_aux": inspect.signature(conn.MooncakeKVManager.send_aux).parameters,
        "commit": inspect.signature(decode.DecodeTransferQueue._commit_transfer_to_req).parameters,
    }
    assert list(params["maybe_send_extra"])[:3] == ["self", "req", "prefill_state_indices"]
    assert list(params["send_aux"])[:2] == ["self", "req"]
    assert list(params["commit"]) == ["self", "decode_req"]
    assert "room" in conn.TransferInfo.__dataclass_fields__


def test_the_transfer_module_names_the_site_hook_s_module_and_log() -> None:
    assert transfer_faults.MOONCAKE_MODULE == server_hooks.MOONCAKE_MODULE
    assert server_hooks.LOG_ENV == "KVDOCTOR_HOOK_LOG"
