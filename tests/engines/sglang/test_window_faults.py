"""The sliding-window faults (``kvdoctor.engines.sglang.window_faults``) on stand-ins of SGLang's objects: where
``swa-early-evict`` moves the eviction frontier, that it fires only while armed, logs every firing, leaves a model
without a window alone, and is found through its record's ``impl``. Needs neither
torch nor SGLang (the real server runs are tests/consistency/test_sglang_window_servers.py)."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest

from kvdoctor.core import faults
from kvdoctor.core.faults import Needs, Role, StatePath
from kvdoctor.engines import arming, hook_log
from kvdoctor.engines.sglang import server_hooks, window_faults


@pytest.mark.parametrize(
    ("pre_len", "window", "page", "early"),
    [
        (200, 63, 1, 231),  # the all-SWA Laguna's window (config 64, SGLang's exclusive 63): 31 in-window slots
        (200, 64, 16, 232),  # half a window, already a whole number of pages
        (200, 8, 16, 207),  # a page bigger than the window: capped below the window, never past the newest token
        (200, 1, 1, 200),  # a one-token window has nothing in it to free early
    ],
)
def test_the_early_frontier_frees_half_a_window_but_never_the_newest_token(
    pre_len: int, window: int, page: int, early: int
) -> None:
    got = window_faults.early_frontier(pre_len, window, page)
    assert got == early
    assert pre_len <= got < pre_len + max(window, 1), "SGLang frees below got - window: inside the window, not past"


def _module(window: int | None = 63, page: int = 1) -> Any:
    calls: list[tuple[str, int, dict[str, Any]]] = []

    class ScheduleBatch:
        def __init__(self) -> None:
            self.tree_cache = types.SimpleNamespace(swa_retain_window=window, page_size=page)

        def _evict_swa(self, req: Any, pre_len: int, **kwargs: Any) -> None:
            calls.append((req.rid, pre_len, kwargs))

    return types.SimpleNamespace(ScheduleBatch=ScheduleBatch, calls=calls)


def _installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: Any, *, arm: tuple[str, ...]
) -> tuple[Path, Path]:
    log, armed = tmp_path / "hook.log", tmp_path / "armed"
    monkeypatch.setenv(server_hooks.LOG_ENV, str(log))
    monkeypatch.setenv(arming.ARM_ENV, str(armed))
    arming.arm(armed, *arm)
    window_faults.swa_early_evict(window_faults.EARLY)[window_faults.SCHEDULE_BATCH_MODULE](module)
    return log, armed


def test_armed_it_hands_sglang_the_early_frontier_and_logs_each_firing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _module()
    log, _ = _installed(tmp_path, monkeypatch, module, arm=(window_faults.EARLY,))
    module.ScheduleBatch()._evict_swa(types.SimpleNamespace(rid="r7"), 200, eviction_interval=1)
    assert module.calls == [("r7", 231, {"eviction_interval": 1})], "SGLang frees below 231 - 63 = 168, not 137"
    events = hook_log.read(log)
    assert events.names() == ["fault-installed", "fault-fired"]
    fired = events.first("fault-fired") or ""
    assert fired.startswith("swa-early-evict rid=r7 pre_len=200 window=63") and "31 in-window slots" in fired


def test_disarmed_or_without_a_window_sglang_s_own_frontier_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _module()
    log, armed = _installed(tmp_path, monkeypatch, module, arm=())
    batch = module.ScheduleBatch()
    batch._evict_swa(types.SimpleNamespace(rid="a"), 200)
    arming.arm(armed, "blank-state-on-hit")  # another fault armed: not this one
    batch._evict_swa(types.SimpleNamespace(rid="b"), 201)
    arming.arm(armed, window_faults.EARLY)
    batch.tree_cache = types.SimpleNamespace(swa_retain_window=None, sliding_window_size=None, page_size=1)
    batch._evict_swa(types.SimpleNamespace(rid="c"), 202)
    assert [c[1] for c in module.calls] == [200, 201, 202]
    assert hook_log.read(log).names() == ["fault-installed"], "nothing fired, nothing claimed"


def test_the_fault_is_found_through_its_record_and_its_record_is_whole() -> None:
    record = faults.get("swa-early-evict", server="sglang", target=faults.Target.SERVER)
    assert record.path is StatePath.SLIDING_WINDOW and record.role is Role.SINGLE and record.needs is Needs.SWA
    assert record.replays == ("sglang#23982",) and record.switchable
    assert {c.symbol for c in record.hooks} >= {"_evict_swa", "free_swa_out_of_window_slots"}
    assert record.impl == f"{window_faults.__name__}:swa_early_evict"
    found = server_hooks.fault_hooks("swa-early-evict")
    assert set(found) == {window_faults.SCHEDULE_BATCH_MODULE}
    assert faults.names(server="sglang", target=faults.Target.SERVER, path=StatePath.SLIDING_WINDOW) == (
        window_faults.EARLY,
    )
