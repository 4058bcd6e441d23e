"""The one engine seam (``kvdoctor.engines``): cheap to import, one adapter per engine loaded by name, and a
capability an engine lacks refused with the one sentence every command prints (runs without a server)."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from kvdoctor._exceptions import InputError
from kvdoctor.engines import Adapter, Capability, Engine, Server, answers_for, load, require


def _modules_after(code: str) -> list[str]:
    probe = (
        f"import sys; {code}; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'sglang', 'vllm', 'pandas') "
        "or m.startswith(('kvdoctor.engines.', 'kvdoctor.state', 'kvdoctor.core.vllm'))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    return ast.literal_eval(out.stdout)  # a printed list of module names


def test_the_seam_imports_no_server_no_torch_and_no_adapter() -> None:
    """The CLI imports the options' enums from the seam at start-up: nothing heavy may come with them."""
    assert _modules_after("import kvdoctor.engines") == []


def test_loading_an_adapter_imports_only_that_adapter_never_its_server() -> None:
    loaded = _modules_after("from kvdoctor.engines import Engine, load; load(Engine.SGLANG)")
    assert loaded == ["kvdoctor.engines.sglang"]  # no sglang, no torch, not vLLM's adapter
    assert _modules_after("from kvdoctor.engines import Engine, load; load(Engine.VLLM)") == ["kvdoctor.engines.vllm"]


@pytest.mark.parametrize(
    ("engine", "server", "capabilities"),
    [
        (Engine.KVDOCTOR, None, {Capability.ROUNDTRIP, Capability.BENCH_ROUNDTRIP}),
        (Engine.SGLANG, Server.SGLANG, set(Capability)),
        (Engine.VLLM, Server.VLLM, {Capability.INSPECT, Capability.ROUNDTRIP, Capability.DRIFT}),
    ],
)
def test_each_engine_answers_exactly_its_capabilities(
    engine: Engine, server: Server | None, capabilities: set[Capability]
) -> None:
    adapter = load(engine)
    assert isinstance(adapter, Adapter) and adapter.engine is engine and adapter.server is server
    assert adapter.capabilities == capabilities


@pytest.mark.parametrize("capability", [Capability.BENCH_ROUNDTRIP])
def test_a_capability_the_engine_lacks_is_refused_with_the_clis_sentence(capability: Capability) -> None:
    expected = (
        f"--engine vllm: {capability.value} runs on kvdoctor or sglang; "
        "vLLM is answered by inspect, roundtrip and drift only"
    )
    with pytest.raises(InputError) as refused:
        require(Engine.VLLM, capability)
    assert str(refused.value) == expected
    assert refused.value.exit_code == 2


def test_asking_an_adapter_directly_for_what_it_lacks_refuses_too() -> None:
    """No caller can slip past ``require`` into kvdoctor's own model: the adapter itself refuses."""
    with pytest.raises(InputError, match="bench roundtrip runs on kvdoctor or sglang"):
        load(Engine.VLLM).bench_paths("inkling-small", (), None, None, None)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"--engine kvdoctor: drift runs on sglang or vllm; kvdoctor is answered by"):
        load(Engine.KVDOCTOR).drift((), (), None, None)  # type: ignore[arg-type]


def test_an_engine_of_the_other_server_is_refused_naming_the_fix() -> None:
    with pytest.raises(InputError) as a:
        answers_for(Engine.VLLM, Server.SGLANG)
    assert str(a.value) == "--engine vllm answers for --server vllm (add --server vllm)"
    with pytest.raises(InputError) as b:
        answers_for(Engine.SGLANG, Server.VLLM)
    assert str(b.value) == "--engine sglang cannot answer for --server vllm (use --engine vllm)"
    assert answers_for(Engine.KVDOCTOR, Server.VLLM).engine is Engine.KVDOCTOR  # the rule model answers both
    assert answers_for(Engine.VLLM, Server.VLLM).engine is Engine.VLLM
