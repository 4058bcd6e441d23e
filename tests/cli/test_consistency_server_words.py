"""``kvdoctor consistency``'s terminal lines name a server through its facts only: a fake third server, registered
through the tables alone (``core.servers.register``, ``core.consistency_facts.TABLE`` and its faults through
``core.faults.register``), gets its own title, noun and fault words (the hook by the fault's state path), and
SGLang's and vLLM's lines are what they were."""

from __future__ import annotations

import io
from collections.abc import Iterator
from types import SimpleNamespace as NS

import pytest
from rich.console import Console

from kvdoctor.cli.consistency import _print_head, print_result
from kvdoctor.consistency.result import ConsistencyResult, FaultReport
from kvdoctor.core import consistency_facts, faults, servers
from kvdoctor.core.consistency_facts import ConsistencyFacts
from kvdoctor.core.faults import Fault, Needs, Role, StatePath, Target
from kvdoctor.core.servers import ServerFacts

FAKE = ConsistencyFacts(
    mamba_state={"mamba_num_heads": 8, "mamba_head_dim": 16, "ssm_state_size": 16, "n_groups": 1},
    shrinks_untied_mamba=True,
    pressed="evicted",
    pressure_consequence="no request was ever evicted",
    fault_site="inside the fake's pressured worker ({hook})",
    fault_hooks={"": "FakeWorker.evict", StatePath.OFFLOAD: "FakeWorker.load"},
    fault_tally="installed {installed}, {restores} evictions faulted",
    fault_problem="crashed",
)


@pytest.fixture
def fake_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    facts = ServerFacts("fakeserve", "FakeServe", "1.0", "fakeserve==1.0", "eviction", ("fakeserve",), "x:y", "x:y")
    monkeypatch.setitem(servers._REGISTERED, "fakeserve", facts)
    monkeypatch.setitem(consistency_facts.TABLE, "fakeserve", f"{__name__}:FAKE")
    records = [
        Fault(name, "fakeserve", Target.SERVER, path, Role.SINGLE, (), "zeroes it", Needs.ANY)
        for name, path in (("zero", StatePath.PREEMPTION), ("zero-load", StatePath.OFFLOAD))
    ]
    monkeypatch.setitem(faults._REGISTERED, "fakeserve", tuple(records))
    servers.facts.cache_clear()
    faults.faults.cache_clear()
    yield "fakeserve"
    servers.facts.cache_clear()
    faults.faults.cache_clear()


def _shown(fn, *args) -> str:  # type: ignore[no-untyped-def]
    console = Console(file=io.StringIO(), width=200)
    fn(console, *args)
    return console.file.getvalue()


def _head(server: str, inject: str = "zero") -> str:
    workload = NS(requests=4, prompt_tokens=8, seed=1, max_new_tokens=4, concurrency=2)
    o = NS(
        model="m",
        shrink=False,
        topology="single",
        device="cpu",
        server=server,
        inject=inject,
        scenario="preempt",
        fault_file=None,
    )
    o.workload = workload
    preview = NS(reference_pool=100, pressured_pool=10, enablers=[NS(name="E", where="all", why="w")], steps=[])
    return _shown(_print_head, NS(options=o, kind=NS(family="llama"), prefix=None), preview)


def _result(server: str, refused: str | None = "boom") -> str:
    fault = FaultReport("zero", "pressured", True, 1, 2, refused)
    r = ConsistencyResult(
        "m", "llama", "single", "cpu", True, {}, fault=fault, server=server, exit_code=0, message="",
        retractions={"pressured": 3}, retraction_source="metrics",
    )  # fmt: skip
    return _shown(print_result, r)


def test_a_registered_server_is_named_by_its_facts(fake_server: str) -> None:
    head = _head(fake_server)
    assert "· cpu · fakeserve" in head and "so FakeServe runs here" in head
    assert "fault: --inject zero inside the fake's pressured worker (FakeWorker.evict)" in head
    assert "(FakeWorker.load)" in _head(fake_server, "zero-load")
    shown = _result(fake_server)
    assert "evictions: pressured 3 (from metrics)" in shown
    assert "fault zero in pressured: installed True, 2 evictions faulted; crashed: boom" in shown


def test_sglang_and_vllm_keep_their_words() -> None:
    sglang, vllm = _head("sglang"), _head("vllm", "drop-offload")
    assert "· cpu\n" in sglang and "so SGLang runs here" in sglang
    assert "fault: --inject zero inside decode-pressured (site hook on Req.offload_kv_cache)" in sglang
    assert "· cpu · vllm" in vllm and "so vLLM runs here" in vllm
    assert "inside pressured (kvdoctor's vllm.general_plugins plugin on CPUOffloadingWorker.submit_load)" in vllm
    assert "GPUModelRunner._update_states" in _head("vllm", "zero-kv")
    assert "GPUModelRunner._update_states" in _head("vllm", "drop-prefix"), "a prefix hit: the runner's hook too"
    transfer = _head("sglang", "drop-pd-state")
    assert "the role its record names, armed for the pressured burst only" in transfer
    assert "retractions: pressured 3" in _result("sglang")
    assert "installed True, 1 backups and 2 restores through it; refused: boom" in _result("sglang")
    assert "preemptions: pressured 3" in _result("vllm")
    assert "installed True, fired on 2 resumed request(s); failed: boom" in _result("vllm", "boom")
