"""Every fault the registry names has an implementation where its target runs, and no implementation is of a fault
the registry does not name (``kvdoctor.core.faults`` is the only table; the engines keep only how). Runs without a
server: the implementations are read (their tables, or the names their code dispatches on), not run."""

from __future__ import annotations

import ast
import inspect
from types import SimpleNamespace

import pytest

from kvdoctor.core import faults
from kvdoctor.core.faults import Needs, StatePath, Target


def _compared_names(module: object, function: str | None = None, variable: str = "inject") -> set[str]:
    """The strings MODULE (or its FUNCTION) compares VARIABLE (the fault's name there) with (``VARIABLE == "x"``)."""
    tree = ast.parse(inspect.getsource(getattr(module, function) if function else module))  # type: ignore[arg-type]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == variable:
            found |= {c.value for c in node.comparators if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    return found


def test_sglang_pools_implement_exactly_the_engine_faults() -> None:
    from kvdoctor.engines.sglang._faults import ENGINE_FAULTS

    assert list(ENGINE_FAULTS) == list(faults.names(server="sglang", target=Target.ENGINE))
    assert [f.summary for f in ENGINE_FAULTS.values()] == [
        f.does for f in faults.select(server="sglang", target=Target.ENGINE)
    ]


def test_a_live_sglang_server_implements_exactly_its_faults() -> None:
    """A live retraction fault is installed by ``live_faults.hooks`` (its records' ``impl``) as one of the pools'
    (through ENGINE_FAULTS) or one ``install`` does itself; every other live fault is its record's own function
    (``tests/core/test_fault_impl.py``)."""
    from kvdoctor.engines.sglang import live_faults
    from kvdoctor.engines.sglang._faults import ENGINE_FAULTS

    own = _compared_names(live_faults, "install", "name")
    assert own == {"drop-kv", "retract-raise"}
    retraction = faults.select(server="sglang", target=Target.SERVER, path=StatePath.RETRACTION)
    assert {f.name for f in retraction} <= set(ENGINE_FAULTS) | own
    assert {f.impl for f in retraction} == {f"{live_faults.__name__}:hooks"}
    others = [f for f in faults.select(server="sglang", target=Target.SERVER) if f.path is not StatePath.RETRACTION]
    assert len({f.impl for f in others}) == len(others) >= 6, "one function per fault off the retraction path"


def test_vllm_s_offloading_round_trip_implements_exactly_its_faults() -> None:
    from kvdoctor.engines.vllm import roundtrip

    assert _compared_names(roundtrip) == set(faults.names(server="vllm", target=Target.ENGINE))


@pytest.mark.parametrize("fault", faults.select(server="vllm", target=Target.SERVER), ids=lambda f: f.name)
def test_vllm_s_plugin_wraps_the_path_each_fault_acts_on(fault: faults.Fault) -> None:
    """Each record's ``impl`` wraps the code of its path: preemption -> resumed requests, prefix hit -> new
    requests' cached blocks, offload -> the offloading worker's loads (an old spelling by the same code, under the
    name it was given); zero-state alone zeroes Mamba groups."""
    from kvdoctor.engines.vllm import server_plugin

    expected = {
        StatePath.PREEMPTION: "_wrap_resumed",
        StatePath.PREFIX_HIT: "_wrap_prefix",
        StatePath.OFFLOAD: "wrap_load",
    }[fault.path]
    for name in (fault.name, *fault.formerly):
        ((module, hook),) = server_plugin.fault_hooks(name).items()
        if fault.path is StatePath.OFFLOAD:
            assert module == server_plugin.OFFLOAD_TARGET
            worker = type("CPUOffloadingWorker", (), {"submit_load": lambda self, job_id: True})
            hook(SimpleNamespace(__name__="m", CPUOffloadingWorker=worker))  # type: ignore[arg-type]
            wrapped, installed = worker.submit_load, worker._kvdoctor_fault  # type: ignore[attr-defined]
        else:
            assert module == server_plugin.TARGET
            runner = type("GPUModelRunner", (), {"_update_states": lambda self, out: None})
            hook(SimpleNamespace(GPUModelRunner=runner))  # type: ignore[arg-type]
            wrapped, installed = runner._update_states, runner._kvdoctor_fault  # type: ignore[attr-defined]
        assert wrapped.__qualname__.startswith(f"{expected}.<locals>."), (name, wrapped.__qualname__)
        assert installed == name


def test_vllm_s_plugin_zeroes_mamba_groups_for_exactly_the_recurrent_faults() -> None:
    from kvdoctor.engines.vllm import server_plugin

    recurrent = {f.name for f in faults.select(server="vllm", target=Target.SERVER) if f.needs is Needs.RECURRENT}
    assert _compared_names(server_plugin, "_wanted", "fault") == recurrent == {"zero-state"}
