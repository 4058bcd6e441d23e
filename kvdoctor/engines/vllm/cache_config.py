"""What vLLM's own config code makes of the cache flags: the Mamba cache mode and block size, and whether the
native offloading connector accepts the groups.

- ``MambaModelConfig.verify_and_update_config`` (``model_executor/models/config.py``; run for every hybrid by
  ``HybridAttentionMambaModelConfig``): with prefix caching the Mamba cache mode becomes ``align`` and the
  Mamba block the attention block; without it the mode is ``none`` and the Mamba block is ``max_model_len``.
  It runs here on a real ``CacheConfig`` beside a stand-in model config carrying what it reads
  (``max_model_len``: the config's ``max_position_embeddings``, an input kvdoctor supplies; the architecture).
- ``build_offloading_config`` (``distributed/kv_transfer/kv_connector/v1/offloading/config.py``) on a real
  ``KVCacheConfig`` of vLLM's own groups and a ``VllmConfig`` with the ``OffloadingConnector`` configured:
  what it raises (a hybrid without prefix caching fails its block-size assertion) is vLLM's refusal.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any

from kvdoctor.core.vllm.analysis import VllmAnalysis
from kvdoctor.core.vllm.refusals import total_kv_heads
from kvdoctor.core.vllm.specs import model_dtype
from kvdoctor.engines.vllm import _runtime as rt

MODELS_CONFIG = "vllm.model_executor.models.config"
OFFLOADING_CONFIG = "vllm.distributed.kv_transfer.kv_connector.v1.offloading.config"


def max_model_len(a: VllmAnalysis) -> int:
    """The model length vLLM's config code is told (kvdoctor's input: ``max_position_embeddings``)."""
    value = a.config.get("max_position_embeddings")
    return value if isinstance(value, int) and value > 0 else 8192


def mamba_cache(a: VllmAnalysis) -> tuple[str, int]:
    """vLLM's resolved ``(mamba_cache_mode, mamba_block_size)`` for this launch (models/config.py)."""
    cache = rt.load("vllm.config.cache").CacheConfig(block_size=a.specs.block_size)
    cache.enable_prefix_caching = a.flags.prefix_caching
    if a.flags.mamba_cache_mode is not None:  # EngineArgs passes it only when given (engine/arg_utils.py)
        cache.mamba_cache_mode = a.flags.mamba_cache_mode
    stand_in = types.SimpleNamespace(
        cache_config=cache,
        model_config=types.SimpleNamespace(max_model_len=max_model_len(a), architecture=a.specs.architecture),
        scheduler_config=types.SimpleNamespace(enable_chunked_prefill=True),  # vLLM's default for generation
    )
    rt.load(MODELS_CONFIG).MambaModelConfig.verify_and_update_config(stand_in)
    return str(cache.mamba_cache_mode), int(cache.mamba_block_size)


def with_mamba_cache(spec: Any, mode: str, block: int) -> Any:
    """A vLLM ``MambaSpec`` as vLLM's Mamba layers build it from the resolved cache config
    (``MambaBase.get_kv_cache_spec``: ``block_size=mamba_block_size``, ``mamba_cache_mode``)."""
    return dataclasses.replace(spec, block_size=block, mamba_cache_mode=mode)


def offloading_refusal(a: VllmAnalysis, groups: list[Any]) -> str | None:
    """What vLLM's ``build_offloading_config`` raises for the OffloadingConnector over GROUPS (vLLM's own
    ``KVCacheGroupSpec`` list), or None when it builds the offloading config."""
    iface = rt.load("vllm.v1.kv_cache_interface")
    kv_config = iface.KVCacheConfig(num_blocks=0, kv_cache_tensors=[], kv_cache_groups=list(groups))
    vllm_config = rt.planning_config(hybrid_manager=len(groups) > 1)
    vllm_config.cache_config.enable_prefix_caching = a.flags.prefix_caching
    vllm_config.cache_config.cache_dtype = a.flags.kv_cache_dtype
    transfer = rt.load("vllm.config.kv_transfer").KVTransferConfig(
        kv_connector="OffloadingConnector",
        kv_role="kv_both",
        engine_id="kvdoctor",
        kv_connector_extra_config=dict(a.flags.transfer.extra) if a.flags.transfer else {},
    )
    object.__setattr__(vllm_config, "kv_transfer_config", transfer)
    stand_in = types.SimpleNamespace(  # what the offloading config reads of the model
        use_mla=a.specs.family.value == "mla",
        dtype=rt.torch_dtype(model_dtype(a.config, a.flags)),
        model=a.config.source,
        max_model_len=max_model_len(a),
        get_total_num_kv_heads=lambda: total_kv_heads(a.config),
    )
    object.__setattr__(vllm_config, "model_config", stand_in)
    try:
        rt.load(OFFLOADING_CONFIG).build_offloading_config(vllm_config, kv_config)
    except (AssertionError, ValueError) as exc:
        return f"build_offloading_config raises {type(exc).__name__}: {exc}"
    return None
