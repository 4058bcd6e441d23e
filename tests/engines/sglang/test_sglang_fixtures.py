"""Every bundled fixture loads in the installed SGLang, and SGLang's config reads it as the rule model does.

The fixtures follow the real Hugging Face configs' field names as SGLang's config classes read them;
this resolves each with SGLang's own ``prepare_server_args`` and ``ModelConfig.from_server_args`` (its
config classes; no weights, no GPU) and compares the answers the rule model derives from the same file: recurrent
state, hybrid SWA, MLA, the layer count, KV heads and head_dim, the served dtype and context length.
"""

from __future__ import annotations

import pytest

from kvdoctor.core.config import bundled_fixtures
from kvdoctor.core.sglang.analysis import analyze, derived_context_length

pytestmark = pytest.mark.sglang

FIXTURES = sorted(bundled_fixtures())


@pytest.fixture
def sglang_config(monkeypatch: pytest.MonkeyPatch):
    """SGLang's ModelConfig for a fixture, resolved the way a scheduler resolves it (SM90 platform stub)."""
    import torch

    from kvdoctor.engines import GpuArch
    from kvdoctor.engines.sglang._runtime import import_sglang, platform_facts, resolve

    arch = GpuArch.SM90
    # DSA's dtype default asks torch for the device generation; answer as the platform stub does.
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: platform_facts(arch)["device_capability"])
    builder = import_sglang("sglang.srt.mem_cache.kv_cache_builder")
    runtimes = []

    def load(name: str):
        runtime = resolve(name, [], arch)
        runtimes.append(runtime)
        return runtime.model_config, builder

    yield load
    for runtime in runtimes:
        runtime.close()


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_loads_in_sglang_and_reads_the_same(name: str, sglang_config) -> None:
    mc, builder = sglang_config(name)
    a = analyze(name)
    cls, spec = a.classification, a.spec
    assert bool(builder.uses_ssm_state(mc)) == cls.uses_ssm_state
    assert bool(mc.is_hybrid_swa) == cls.is_hybrid_swa
    assert (mc.attention_arch.name == "MLA") == cls.is_mla
    assert mc.num_hidden_layers == spec.num_layers
    assert str(mc.dtype).removeprefix("torch.") == spec.kv_dtype.payload or spec.kv_dtype.flag != "auto"
    assert mc.context_len == derived_context_length(a.config)
    full = spec.full
    if full is not None and not full.mla and not cls.is_dsv4:
        assert (mc.get_num_kv_heads(1), mc.head_dim) == (full.kv_heads, full.head_dim)
