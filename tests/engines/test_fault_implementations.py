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
    """A live retraction fault is one of the pools' (installed through ENGINE_FAULTS) or one ``install`` does
    itself; a transfer fault is one ``transfer_faults.hooks`` dispatches on."""
    from kvdoctor.engines.sglang import live_faults, transfer_faults
    from kvdoctor.engines.sglang._faults import ENGINE_FAULTS

    own = _compared_names(live_faults, "install", "name")
    assert own == {"drop-kv", "retract-raise"}
    retraction = faults.names(server="sglang", target=Target.SERVER, path=StatePath.RETRACTION)
    assert set(retraction) <= set(ENGINE_FAULTS) | own
    transfer = faults.names(server="sglang", target=Target.SERVER, path=StatePath.TRANSFER)
    assert set(transfer) == _compared_names(transfer_faults, "hooks", "name") == {"drop-pd-state", "clear-pd-state"}


def test_vllm_s_offloading_round_trip_implements_exactly_its_faults() -> None:
    from kvdoctor.engines.vllm import roundtrip

    assert _compared_names(roundtrip) == set(faults.names(server="vllm", target=Target.ENGINE))


@pytest.mark.parametrize("fault", faults.select(server="vllm", target=Target.SERVER), ids=lambda f: f.name)
def test_vllm_s_plugin_wraps_the_path_each_fault_acts_on(fault: faults.Fault) -> None:
    """The plugin picks its wrapper by the registry's path: preemption -> resumed requests, prefix hit -> new
    requests' cached blocks, offload -> the offloading worker's loads; zero-state alone zeroes Mamba groups."""
    from kvdoctor.engines.vllm import server_plugin

    expected = {
        StatePath.PREEMPTION: "_wrap_resumed",
        StatePath.PREFIX_HIT: "_wrap_prefix",
        StatePath.OFFLOAD: "wrap_load",
    }[fault.path]
    for name in (fault.name, *fault.formerly):
        if fault.path is StatePath.OFFLOAD:
            worker = type("CPUOffloadingWorker", (), {"submit_load": lambda self, job_id: True})
            server_plugin._patch_offload(SimpleNamespace(__name__="m", CPUOffloadingWorker=worker), name)
            wrapped = worker.submit_load
        else:
            runner = type("GPUModelRunner", (), {"_update_states": lambda self, out: None})
            server_plugin._patch(SimpleNamespace(GPUModelRunner=runner), name)
            wrapped = runner._update_states
        assert wrapped.__qualname__.startswith(f"{expected}.<locals>."), (name, wrapped.__qualname__)


def test_vllm_s_plugin_zeroes_mamba_groups_for_exactly_the_recurrent_faults() -> None:
    from kvdoctor.engines.vllm import server_plugin

    recurrent = {f.name for f in faults.select(server="vllm", target=Target.SERVER) if f.needs is Needs.RECURRENT}
    assert _compared_names(server_plugin, "_wanted", "fault") == recurrent == {"zero-state"}
