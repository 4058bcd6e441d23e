"""The radix-hit faults (``kvdoctor.engines.sglang.hit_faults``) on stand-ins of SGLang's objects: what each does to a
hit's copy-on-write, that it fires only while armed, logs every firing, and is found through its record's ``impl``.
Needs torch, not SGLang (the real server runs are test_sglang_prefix_servers.py)."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest
import torch

from kvdoctor.core import faults
from kvdoctor.core.faults import Role, StatePath
from kvdoctor.engines import arming, hook_log
from kvdoctor.engines.sglang import hit_faults, server_hooks


def _req(rid: str, src: int | None, own: int) -> Any:
    kv = types.SimpleNamespace(
        mamba_cow_src_index=None if src is None else torch.tensor([src]),
        mamba_pool_idx=torch.tensor(own),
        mamba_needs_clear=False,
    )
    return types.SimpleNamespace(rid=rid, prefix_len=32, kv=kv)


def test_blank_state_turns_each_hit_s_copy_into_a_clear_and_leaves_misses_alone() -> None:
    hit, miss = _req("a", 7, 3), _req("b", None, 4)
    fired = hit_faults.Redirect(hit_faults.BLANK)([hit, miss])
    assert hit.kv.mamba_cow_src_index is None and hit.kv.mamba_needs_clear
    assert miss.kv.mamba_cow_src_index is None and not miss.kv.mamba_needs_clear
    assert fired == ["rid=a cached=32 copy-on-write -> clear"]


def test_stale_state_copies_from_a_slot_never_written_for_the_prefix() -> None:
    redirect = hit_faults.Redirect(hit_faults.STALE)
    first, second, same = _req("a", 7, 3), _req("b", 9, 4), _req("c", 9, 5)
    redirect([first])
    assert first.kv.mamba_cow_src_index.tolist() == [3], "first hit: its own new slot (its last occupant's state)"
    redirect([second])
    assert second.kv.mamba_cow_src_index.tolist() == [7], "then: the previous hit's checkpoint of another prefix"
    redirect([same])
    assert same.kv.mamba_cow_src_index.tolist() == [5], "never the checkpoint of its own prefix"
    assert not any(r.kv.mamba_needs_clear for r in (first, second, same))


def _module() -> types.ModuleType:
    calls: list[list[Any]] = []

    class ScheduleBatch:
        def _collect_deferred_mamba_cow_and_clear(self, reqs: list[Any]) -> None:
            calls.append([(r.kv.mamba_cow_src_index, r.kv.mamba_needs_clear) for r in reqs])

    return types.SimpleNamespace(ScheduleBatch=ScheduleBatch, calls=calls)  # type: ignore[return-value]


def test_the_hook_fires_only_while_armed_and_logs_each_firing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log, armed = tmp_path / "hook.log", tmp_path / "armed"
    monkeypatch.setenv(server_hooks.LOG_ENV, str(log))
    monkeypatch.setenv(arming.ARM_ENV, str(armed))
    module = _module()
    (hook,) = hit_faults.blank_state_on_hit(hit_faults.BLANK).values()
    hook(module)  # type: ignore[arg-type]
    batch = module.ScheduleBatch()
    arming.disarm(armed)
    batch._collect_deferred_mamba_cow_and_clear([_req("a", 7, 3)])
    assert module.calls[-1][0][0].tolist() == [7], "disarmed: SGLang's own copy-on-write"
    arming.arm(armed, hit_faults.BLANK)
    batch._collect_deferred_mamba_cow_and_clear([_req("b", 7, 3)])
    assert module.calls[-1][0] == (None, True)
    events = hook_log.read(log)
    assert events.count("fault-installed") == 1
    assert events.details("fault-fired") == ["blank-state-on-hit rid=b cached=32 copy-on-write -> clear"]


def test_every_radix_hit_fault_is_a_recurrent_single_server_record_found_through_its_path() -> None:
    records = faults.select(server="sglang", path=StatePath.PREFIX_HIT)
    assert {f.name for f in records} == {hit_faults.BLANK, hit_faults.STALE, hit_faults.UNWRITTEN}
    for f in records:
        assert f.role is Role.SINGLE and f.switchable and f.replays and f.needs.value == "recurrent"
        assert all(b.startswith("sglang#") for b in f.replays)
        module = hit_faults.MAMBA_MODULE if f.name == hit_faults.UNWRITTEN else hit_faults.SCHEDULE_BATCH_MODULE
        assert f.impl == f"{hit_faults.__name__}:{f.name.replace('-', '_')}"
        assert list(server_hooks.fault_hooks(f.name)) == [module]
    assert hit_faults.LOG_ENV == server_hooks.LOG_ENV, "it logs where the site hook logs"
