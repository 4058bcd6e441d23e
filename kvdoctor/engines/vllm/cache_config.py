"""What vLLM's own config code makes of the cache flags: the Mamba cache mode and block size, and whether the
native offloading connector accepts the groups.

- ``MambaModelConfig.verify_and_update_config`` (``model_executor/models/config.py``; run for every hybrid by
  ``HybridAttentionMambaModelConfig``): with prefix caching the Mamba cache mode becomes ``align`` and the
  Mamba block the attention block; without it the mode is ``none`` and the Mamba block is ``max_model_len``.
  It runs here on a real ``CacheConfig`` beside a stand-in model config carrying what it reads: the
  architecture, and ``max_model_len`` as vLLM's own code derives it (below).
- ``max_model_len``: vLLM's ``_get_and_verify_max_len`` (``config/model.py``) over the text config vLLM's own
  ``get_config`` / ``get_hf_text_config`` build from the model's config.json (transformers' config class, its
  defaults and RoPE standardisation included), the length keys read by the model type's
  ``ModelArchConfigConvertor``, and ``--max-model-len`` as vLLM's own ``human_readable_int_or_auto`` reads it.
- ``build_offloading_config`` (``distributed/kv_transfer/kv_connector/v1/offloading/config.py``) on a real
  ``KVCacheConfig`` of vLLM's own groups and a ``VllmConfig`` with the ``OffloadingConnector`` configured:
  what it raises (a hybrid without prefix caching fails its block-size assertion) is vLLM's refusal.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvdoctor.core.vllm.analysis import VllmAnalysis
from kvdoctor.core.vllm.refusals import total_kv_heads
from kvdoctor.core.vllm.specs import model_dtype
from kvdoctor.engines.vllm import _runtime as rt

MODELS_CONFIG = "vllm.model_executor.models.config"
OFFLOADING_CONFIG = "vllm.distributed.kv_transfer.kv_connector.v1.offloading.config"


@dataclass(frozen=True)
class VllmLength:
    """vLLM's own ``max_model_len`` for a launch, or its refusal (then ``tokens`` is the length asked)."""

    tokens: int
    refusal: str | None = None

    @property
    def answer(self) -> str:
        return "refused" if self.refusal else str(self.tokens)


_TEXT_CONFIGS: dict[str, tuple[Any, Any]] = {}  # config.json text -> (hf_config, hf_text_config): a matrix asks often


def hf_configs(a: VllmAnalysis) -> tuple[Any, Any]:
    """vLLM's ``get_config`` and ``get_hf_text_config`` on the model's config.json (written to a scratch
    directory, as vLLM reads a model directory), cached per config."""
    text = json.dumps(a.config.top, sort_keys=True)
    if text not in _TEXT_CONFIGS:
        hf = rt.load("vllm.transformers_utils.config")
        with tempfile.TemporaryDirectory(prefix="kvdoctor-vllm-config-") as scratch:
            Path(scratch, "config.json").write_text(text, encoding="utf-8")
            config = hf.get_config(scratch, trust_remote_code=False)
        _TEXT_CONFIGS[text] = (config, hf.get_hf_text_config(config))
    return _TEXT_CONFIGS[text]


def vllm_max_model_len(a: VllmAnalysis) -> VllmLength:
    """``max_model_len`` as vLLM 0.33's ``_get_and_verify_max_len`` resolves it for this launch; its
    ``ValueError`` (a length above what the config allows) is vLLM's refusal."""
    rt.load("vllm.config")  # vllm.config first: model_arch_config_convertor imports it back (a cycle)
    model = rt.load("vllm.config.model")
    convertors = rt.load("vllm.transformers_utils.model_arch_config_convertor")
    hf_config, text = hf_configs(a)
    cls = convertors.MODEL_ARCH_CONFIG_CONVERTORS.get(hf_config.model_type, convertors.ModelArchConfigConvertorBase)
    arch = types.SimpleNamespace(derived_max_model_len_and_key=cls(hf_config, text).derive_max_model_len_and_key())
    asked = _asked_length(a)
    try:
        tokens = model._get_and_verify_max_len(
            hf_config=text,
            model_arch_config=arch,
            tokenizer_config=None,  # read only for pooling models with absolute position embeddings
            max_model_len=asked,
            disable_sliding_window=False,  # --disable-sliding-window is not modelled (listed as such)
            sliding_window=getattr(text, "sliding_window", None) or None,
        )
    except ValueError as exc:
        return VllmLength(int(asked or 0), f"_get_and_verify_max_len raises ValueError: {str(exc).split(' To ')[0]}")
    return VllmLength(int(tokens))


def _asked_length(a: VllmAnalysis) -> int | None:
    """``--max-model-len`` as vLLM's argparse type reads the launch line's text (None: not given)."""
    text = a.flags.max_model_len_text
    if text is None:
        return None
    return int(rt.load("vllm.utils.argparse_utils").human_readable_int_or_auto(text))


def mamba_cache(a: VllmAnalysis, length: VllmLength) -> tuple[str, int]:
    """vLLM's resolved ``(mamba_cache_mode, mamba_block_size)`` for this launch (models/config.py), LENGTH
    being vLLM's own ``max_model_len``."""
    cache = rt.load("vllm.config.cache").CacheConfig(block_size=a.specs.block_size)
    cache.enable_prefix_caching = a.flags.prefix_caching
    if a.flags.mamba_cache_mode is not None:  # EngineArgs passes it only when given (engine/arg_utils.py)
        cache.mamba_cache_mode = a.flags.mamba_cache_mode
    stand_in = types.SimpleNamespace(
        cache_config=cache,
        model_config=types.SimpleNamespace(max_model_len=length.tokens, architecture=a.specs.architecture),
        scheduler_config=types.SimpleNamespace(enable_chunked_prefill=True),  # vLLM's default for generation
    )
    rt.load(MODELS_CONFIG).MambaModelConfig.verify_and_update_config(stand_in)
    return str(cache.mamba_cache_mode), int(cache.mamba_block_size)


def with_mamba_cache(spec: Any, mode: str, block: int) -> Any:
    """A vLLM ``MambaSpec`` as vLLM's Mamba layers build it from the resolved cache config
    (``MambaBase.get_kv_cache_spec``: ``block_size=mamba_block_size``, ``mamba_cache_mode``)."""
    return dataclasses.replace(spec, block_size=block, mamba_cache_mode=mode)


def offloading_refusal(a: VllmAnalysis, groups: list[Any], length: VllmLength) -> str | None:
    """What vLLM's ``build_offloading_config`` raises for the OffloadingConnector over GROUPS (vLLM's own
    ``KVCacheGroupSpec`` list) at vLLM's own max_model_len LENGTH, or None when it builds the offloading config."""
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
        max_model_len=length.tokens,
        get_total_num_kv_heads=lambda: total_kv_heads(a.config),
    )
    object.__setattr__(vllm_config, "model_config", stand_in)
    try:
        rt.load(OFFLOADING_CONFIG).build_offloading_config(vllm_config, kv_config)
    except (AssertionError, ValueError) as exc:
        return f"build_offloading_config raises {type(exc).__name__}: {exc}"
    return None
