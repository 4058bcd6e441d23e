"""The in-server recorder (``kvdoctor.engines.sglang.digests``) on stand-in pools shaped like SGLang's: the copy's
digest equals the live slots' for a faithful copy and not for a changed byte; the ledger gives the positions;
a failure inside the recorder never reaches SGLang.
(SGLang's own pools: tests/engines/sglang/test_sglang_state_trace.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from kvdoctor.consistency import deploy
from kvdoctor.consistency.workload import Workload
from kvdoctor.engines.sglang import digests


class MHA:
    """``MHATokenToKVPool``'s buffers and ``get_cpu_copy`` shape: ``[layer][chunk] = [k, v]``."""

    def __init__(self, slots: int, layers: int = 2) -> None:
        g = torch.Generator().manual_seed(0)
        self.layer_num = layers
        self.k_buffer = [torch.randn(slots, 2, 4, generator=g) for _ in range(layers)]
        self.v_buffer = [torch.randn(slots, 2, 4, generator=g) for _ in range(layers)]

    def get_cpu_copy(self, indices: torch.Tensor, **_: Any) -> list[list[list[torch.Tensor]]]:
        return [[[self.k_buffer[i][indices].clone(), self.v_buffer[i][indices].clone()]] for i in range(self.layer_num)]

    def load_cpu_copy(self, copy: Any, indices: torch.Tensor, **_: Any) -> None:
        for i in range(self.layer_num):
            self.k_buffer[i][indices], self.v_buffer[i][indices] = copy[i][0][0], copy[i][0][1]


class Mamba:
    """``MambaPool``: ``mamba_cache.conv`` (a list of ``[layers, slots, ...]``) and ``temporal``."""

    def __init__(self, slots: int) -> None:
        self.mamba_cache = SimpleNamespace(conv=[torch.randn(2, slots, 3, 4)], temporal=torch.empty(2, slots, 0))
        self._slot_siblings: tuple[Any, ...] = ()

    def get_cpu_copy(self, indices: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        return [c[:, indices].clone() for c in self.mamba_cache.conv], self.mamba_cache.temporal[:, indices].clone()

    def load_cpu_copy(self, copy: Any, indices: torch.Tensor) -> None:
        for conv, saved in zip(self.mamba_cache.conv, copy[0], strict=True):
            conv[:, indices] = saved


class Hybrid:
    """``HybridLinearKVPool``: the copy carries the recurrent state, ``(kv, mamba)``."""

    cpu_copy_carries_mamba = True

    def __init__(self, slots: int, mamba: Mamba) -> None:
        self.full_kv_pool, self.mamba_pool = MHA(slots), mamba

    def get_cpu_copy(self, indices: torch.Tensor, mamba_indices: Any = None, **_: Any) -> Any:
        return self.full_kv_pool.get_cpu_copy(indices), self.mamba_pool.get_cpu_copy(mamba_indices.reshape(1))

    def load_cpu_copy(self, copy: Any, indices: torch.Tensor, mamba_indices: Any = None, **_: Any) -> None:
        self.full_kv_pool.load_cpu_copy(copy[0], indices)
        self.mamba_pool.load_cpu_copy(copy[1], mamba_indices.reshape(1))


def _server(slots: int = 16) -> tuple[Any, Any, Any]:
    mamba = Mamba(8)
    kv = Hybrid(slots, mamba)
    allocator = SimpleNamespace(get_kvcache=lambda: kv)
    r2t = SimpleNamespace(req_to_token=torch.arange(4 * slots).reshape(4, slots) % slots, mamba_pool=mamba)
    req = SimpleNamespace(
        rid="r1",
        origin_input_ids=[5, 6, 7],
        output_ids=[8, 9],
        retraction_count=0,
        kv=SimpleNamespace(req_pool_idx=1, mamba_pool_idx=torch.tensor(3), retraction_backup=None),
    )
    req.seqlen = 5
    return req, r2t, allocator


def _offload(req: Any, r2t: Any, allocator: Any) -> None:
    idx = r2t.req_to_token[req.kv.req_pool_idx, : req.seqlen - 1]
    kv = allocator.get_kvcache()
    req.kv.retraction_backup = SimpleNamespace(cpu_tensors=kv.get_cpu_copy(idx, req.kv.mamba_pool_idx), mamba_cpu=None)


def _load(req: Any, r2t: Any, allocator: Any) -> None:
    idx = r2t.req_to_token[req.kv.req_pool_idx, : req.seqlen - 1]
    allocator.get_kvcache().load_cpu_copy(req.kv.retraction_backup.cpu_tensors, idx, req.kv.mamba_pool_idx)
    req.kv.retraction_backup = None


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_faithful_round_trip_has_one_digest_per_component_at_every_seam(tmp_path: Path) -> None:
    req, r2t, allocator = _server()
    rec = digests.Recorder(str(tmp_path / "d.jsonl"), lambda m: pytest.fail(m))
    batch = SimpleNamespace(forward_mode=Mode("decode"), reqs=[req], seq_lens_cpu=torch.tensor([5]))
    scheduler = SimpleNamespace(enable_overlap=True, req_to_token_pool=r2t, token_to_kv_pool_allocator=allocator)
    rec.before_forward(scheduler, batch)  # the forward fed position 4: the state has absorbed 5 positions
    rec.backup(req, r2t, allocator, lambda: _offload(req, r2t, allocator))
    req.kv.req_pool_idx, req.kv.mamba_pool_idx = 2, torch.tensor(5)  # resumed into other slots
    rec.restore(req, r2t, allocator, lambda: _load(req, r2t, allocator))
    rec.before_forward(scheduler, batch)
    scheduler_event, backup, restore, forward = _events(tmp_path / "d.jsonl")
    assert scheduler_event["overlap"] is True
    assert set(backup["live"]) == {"full_kv", "conv_state"} and backup["live"] == backup["copy"]
    assert backup["state_pos"] == 5 and backup["kv_tokens"] == 4 and backup["retraction"] == 1
    assert restore["held"] == backup["copy"] and restore["live"] == backup["copy"]
    assert restore["mamba_slot"] == 5 and restore["row"] == 2 and forward["live"] == restore["live"]
    assert forward["fed"] == 4 and backup["prompt"] == digests.prompt_key([5, 6, 7])


def test_a_changed_byte_in_the_copy_changes_only_that_components_digest(tmp_path: Path) -> None:
    req, r2t, allocator = _server()
    rec = digests.Recorder(str(tmp_path / "d.jsonl"), lambda m: pytest.fail(m))

    def corrupt() -> None:
        _offload(req, r2t, allocator)
        req.kv.retraction_backup.cpu_tensors[1][0][0].view(torch.uint8).view(-1)[7] ^= 1  # one bit of the conv copy

    rec.backup(req, r2t, allocator, corrupt)
    (backup,) = _events(tmp_path / "d.jsonl")
    assert backup["live"]["full_kv"] == backup["copy"]["full_kv"]
    assert backup["live"]["conv_state"] != backup["copy"]["conv_state"]


def test_a_failure_inside_the_recorder_never_reaches_sglang(tmp_path: Path) -> None:
    req, r2t, _ = _server()
    errors: list[str] = []
    rec = digests.Recorder(str(tmp_path / "d.jsonl"), errors.append)
    broken = SimpleNamespace(get_kvcache=lambda: (_ for _ in ()).throw(RuntimeError("no pool")))
    assert rec.backup(req, r2t, broken, lambda: "sglang's value") == "sglang's value"
    assert rec.backup(req, r2t, broken, lambda: "again") == "again"
    assert len(errors) == 1 and "RuntimeError: no pool" in errors[0]


def test_the_wrappers_return_what_sglangs_methods_return(tmp_path: Path) -> None:
    class Req:
        def offload_kv_cache(self, a: Any, b: Any) -> str:
            return f"offload {a} {b}"

        def load_kv_cache(self, a: Any, b: Any) -> str:
            return f"load {a} {b}"

    calls: list[str] = []
    rec = SimpleNamespace(
        backup=lambda req, a, b, fn: (calls.append("backup"), fn())[1],
        restore=lambda req, a, b, fn: (calls.append("restore"), fn())[1],
    )
    digests.hook_schedule_batch(SimpleNamespace(Req=Req), rec)  # type: ignore[arg-type]
    assert Req().offload_kv_cache(1, 2) == "offload 1 2" and Req().load_kv_cache(3, 4) == "load 3 4"
    assert calls == ["backup", "restore"] and Req.offload_kv_cache.__name__ == "offload_kv_cache"


def test_slot_runs_are_exact() -> None:
    assert digests.slot_runs([3, 4, 5, 9, 10, 2]) == [[3, 3], [9, 2], [2, 1]]
    assert digests.slot_runs([]) == []


def test_only_the_pressured_decode_records_a_trace() -> None:
    base = deploy.DeployOptions("/m", "pd", "cpu", Workload(), True, site_hook_dir="/hook", digest_log="/r/d.jsonl")
    d = deploy.build(base, [1, 2, 3, 4, 5, 6])
    assert d.step("decode-pressured").env["KVDOCTOR_DIGEST_LOG"] == "/r/d.jsonl"
    assert all("KVDOCTOR_DIGEST_LOG" not in s.env for s in d.steps if s.role != "decode-pressured")


class Mode:
    def __init__(self, name: str) -> None:
        self.name = name

    def is_prebuilt(self) -> bool:
        return self.name == "prebuilt"

    def is_extend(self) -> bool:
        return self.name == "extend"
