"""What vLLM 0.33.0 does, restated once, each fact naming the file and lines of the wheel it mirrors.

Read from ``pip download --no-deps vllm==0.33.0`` (never imported here). When vLLM moves, this module
(and the generated ``server_flags``/``architectures``) is what gets re-checked; ``tests/vllm`` holds
vLLM's own code to every answer derived from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from kvdoctor.core.vllm._generated.server_flags import VLLM_VERSION

RULES_REVISION = f"vllm=={VLLM_VERSION}"


class Family(str, Enum):
    """How a model's layers map to KV cache specs (``get_kv_cache_spec`` of each layer)."""

    DENSE = "dense"  # every layer FullAttentionSpec
    SWA_LAYER_TYPES = "swa_layer_types"  # config.layer_types: sliding_attention / full_attention
    SWA_PATTERN = "swa_pattern"  # Gemma 2/3: every Nth layer full, the rest sliding
    MLA = "mla"  # MLAAttentionSpec (latent KV, one head)
    GDN = "gdn"  # Qwen3-Next: gated delta net MambaSpec + full attention
    MAMBA2_HYBRID = "mamba2_hybrid"  # Nemotron-H: Mamba2 MambaSpec + full attention


# architecture → family, for the architectures kvdoctor's vLLM rules model. Each row's layer rule:
#   qwen3_next.py:259-313 (layer_types, default from full_attention_interval), nemotron_h.py (hybrid_override_pattern
#   M = Mamba2 mixer, * = attention, - / E = MLP / MoE without state), gpt_oss.py (layer_types + sliding_window),
#   gemma3.py / gemma2.py (layer_types, transformers' default: layer i is sliding unless (i + 1) % pattern == 0),
#   deepseek_v2.py (MLAAttention: kv_lora_rank + qk_rope_head_dim, one latent head).
FAMILIES: dict[str, Family] = {
    "LlamaForCausalLM": Family.DENSE,
    "MistralForCausalLM": Family.DENSE,
    "Qwen2ForCausalLM": Family.DENSE,
    "Qwen3ForCausalLM": Family.DENSE,
    "Qwen3MoeForCausalLM": Family.DENSE,
    "GptOssForCausalLM": Family.SWA_LAYER_TYPES,
    "Gemma2ForCausalLM": Family.SWA_PATTERN,
    "Gemma3ForCausalLM": Family.SWA_PATTERN,
    "Gemma3ForConditionalGeneration": Family.SWA_PATTERN,
    "DeepseekV2ForCausalLM": Family.MLA,
    "DeepseekV3ForCausalLM": Family.MLA,
    "Qwen3NextForCausalLM": Family.GDN,
    "NemotronHForCausalLM": Family.MAMBA2_HYBRID,
}
GEMMA2_PATTERN = 2  # transformers' Gemma2Config: layer_types alternate, sliding first

# cache_config.py: CacheConfig.DEFAULT_BLOCK_SIZE = 16 (config/cache.py:185).
DEFAULT_BLOCK_SIZE = 16
# FLASH_ATTN (the CUDA default backend) kernel blocks are MultipleOf(16): v1/attention/backends/flash_attn.py:357-370.
KERNEL_BLOCK_ALIGNMENT = 16
# platforms/interface.py:1084-1088: hybrid MLA/Mamba models align the block size to 128 tokens.
MLA_KERNEL_BLOCK_ALIGNMENT = 128
# NemotronHForCausalLMConfig.DEFAULT_MAMBA_SSM_CACHE_DTYPE (model_executor/models/config.py:812-832).
NEMOTRON_H_SSM_DTYPE = "float32"

# KV cache dtypes (config/cache.py:44-67, CacheDType) → bytes per element; None: a packed layout.
KV_DTYPE_BYTES: dict[str, float | None] = {
    "auto": None,
    "bfloat16": 2,
    "float16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
    "nvfp4": None,
    "nvfp4_4over6": None,
}
# Block-scaled KV dtypes: packed FP4 payload + FP8 block scales per 16 elements, one byte row per side
# (utils/torch_utils.py:542-544 nvfp4_kv_cache_full_dim, flashinfer.py:561-565 customize_spec).
BLOCK_SCALED_KV_DTYPES = frozenset({"nvfp4", "nvfp4_4over6"})
MODEL_DTYPES = {"bfloat16": 2, "float16": 2, "float32": 4, "half": 2, "float": 4}
STATE_DTYPES = ("auto", "float32", "bfloat16", "float16")  # MambaDType (config/cache.py)


@dataclass(frozen=True)
class Cite:
    """A place in the vLLM wheel: file and lines (and, where it helps, the symbol)."""

    path: str
    lines: str
    symbol: str = ""

    def __str__(self) -> str:
        where = f"vllm/{self.path}:{self.lines}"
        return f"{where} ({self.symbol})" if self.symbol else where


GROUPING = Cite("v1/core/kv_cache_planning.py", "1113-1200", "get_kv_cache_groups")
UNIFY_PAGE = Cite("v1/core/kv_cache_planning.py", "346-408", "unify_kv_cache_spec_page_size")
GROUP_BY_PAGE = Cite("v1/core/kv_cache_planning.py", "416-556", "_get_kv_cache_groups_uniform_page_size")
PROMOTE = Cite("v1/core/kv_cache_planning.py", "744-815", "_promote_local_kv_cache_specs")
ALIGN_HYBRID = Cite("platforms/interface.py", "940-1131", "_align_hybrid_block_size")
PREEMPT = Cite("v1/core/sched/scheduler.py", "1799-1843", "Scheduler._preempt_request")
HMA_OFF = Cite("config/vllm.py", "2263-2279", "VllmConfig: connector without SupportsHMA")
SUPPORTS_HMA = Cite("distributed/kv_transfer/kv_connector/v1/base.py", "101-136", "SupportsHMA / supports_hma")
TRANSFER_GROUPS = Cite("v1/kv_cache_interface.py", "1561-1577", "KVCacheConfig.prefix_cacheable_group_ids")
CIRCULAR_NOT_CACHEABLE = Cite("v1/kv_cache_interface.py", "998-1000", "CircularBufferSpec.prefix_cacheable")
OFFLOAD_GROUPS = Cite(
    "distributed/kv_transfer/kv_connector/v1/offloading/config.py", "38-45", "get_offloading_group_ids"
)
OFFLOAD_WINDOW = Cite(
    "distributed/kv_transfer/kv_connector/v1/offloading/config.py", "58-84", "get_sliding_window_size_in_chunks"
)
OFFLOAD_MAMBA = Cite(
    "distributed/kv_transfer/kv_connector/v1/offloading/worker.py", "122-129", "MambaSpec pages registered"
)
OFFLOAD_FLAGS = Cite("config/vllm.py", "1151-1184", "_post_init_kv_transfer_config")
LMCACHE_MP_ONE_GROUP = Cite(
    "distributed/kv_transfer/kv_connector/v1/lmcache_mp_connector.py", "70-83", "reformat_block_ids"
)
NIXL_CONV = Cite("distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py", "674-712", "conv-state transfer")
CONNECTOR_REGISTRY = Cite("distributed/kv_transfer/kv_connector/factory.py", "153-249", "register_connector")
NVFP4_PACKING = Cite("utils/torch_utils.py", "542-544", "nvfp4_kv_cache_full_dim")
# Start-up refusals of --tensor-parallel-size (hazard KVD114, core/vllm/refusals.py), in vLLM's words:
# ModelConfig.verify_with_parallel_config (VllmConfig.__post_init__) divides the attention heads by TP;
# QKVParallelLinear (every attention layer's QKV projection) splits the KV heads over TP, or replicates them
# when there are fewer, with distributed/utils.py:divide, which asserts the division is exact.
TP_HEADS = Cite("config/model.py", "1557-1564", "ModelConfig.verify_with_parallel_config")
TP_HEADS_MESSAGE = "Total number of attention heads ({heads}) must be divisible by tensor parallel size ({tp})."
TP_KV_HEADS = Cite("model_executor/layers/linear.py", "1064-1071", "QKVParallelLinear: divide")
TP_KV_HEADS_MESSAGE = "{numerator} is not divisible by {denominator}"
DIVIDE = Cite("distributed/utils.py", "51-55", "ensure_divisibility")

# HFConfigParser.parse builds the config with AutoConfig.from_pretrained (after _CONFIG_REGISTRY): an unknown
# model_type raises (the names: model_types.py).
CONFIG_LOADER = Cite("transformers_utils/config.py", "443-452", "HFConfigParser.parse: AutoConfig.from_pretrained")


class Carries(str, Enum):
    """What a connector does with a group."""

    CARRIED = "carried"
    WINDOW = "carried (window only)"
    LEFT = "left behind"
    REFUSED = "start-up failure"


@dataclass(frozen=True)
class ConnectorRule:
    """One registered connector (factory.py:153-249): its class, HMA support, and what it moves."""

    name: str
    module: str  # under vllm/distributed/kv_transfer/kv_connector/v1/
    supports_hma: bool  # subclasses SupportsHMA (the class line in ``module``)
    kind: str  # "offload" (to CPU/storage and back) or "pd" (prefill → decode) or "other"
    carries_mamba: bool  # has a MambaSpec path
    where: Cite
    note: str = ""


def _c(path: str, lines: str, symbol: str) -> Cite:
    return Cite(f"distributed/kv_transfer/kv_connector/v1/{path}", lines, symbol)


CONNECTORS: dict[str, ConnectorRule] = {
    rule.name: rule
    for rule in (
        ConnectorRule(
            "OffloadingConnector",
            "offloading_connector",
            True,
            "offload",
            True,
            _c("offloading_connector.py", "53", "class OffloadingConnector(KVConnectorBase_V1, SupportsHMA)"),
            "prefix-cacheable groups; Mamba pages registered whole; sliding window window-sized",
        ),
        ConnectorRule(
            "SimpleCPUOffloadConnector",
            "simple_cpu_offload_connector",
            True,
            "offload",
            True,
            _c("simple_cpu_offload_connector.py", "80", "class SimpleCPUOffloadConnector(..., SupportsHMA)"),
            "VLLM_USE_SIMPLE_KV_OFFLOAD=1 with --kv-offloading-backend native",
        ),
        ConnectorRule(
            "LMCacheConnectorV1",
            "lmcache_connector",
            False,
            "offload",
            False,
            _c("lmcache_connector.py", "68", "class LMCacheConnectorV1(KVConnectorBase_V1)"),
        ),
        ConnectorRule(
            "LMCacheMPConnector",
            "lmcache_mp_connector",
            False,
            "offload",
            False,
            LMCACHE_MP_ONE_GROUP,
            "raises unless --disable-hybrid-kv-cache-manager leaves one group",
        ),
        ConnectorRule(
            "FlexKVConnectorV1",
            "flexkv_connector",
            False,
            "offload",
            False,
            _c("flexkv_connector.py", "35", "class FlexKVConnectorV1(KVConnectorBase_V1)"),
        ),
        ConnectorRule(
            "HF3FSKVConnector",
            "hf3fs.hf3fs_connector",
            False,
            "offload",
            False,
            _c("hf3fs/hf3fs_connector.py", "466", "class HF3FSKVConnector(KVConnectorBase_V1)"),
        ),
        ConnectorRule(
            "ExampleConnector",
            "example_connector",
            False,
            "other",
            False,
            _c("example_connector.py", "85", "class ExampleConnector(KVConnectorBase_V1)"),
        ),
        ConnectorRule("NixlConnector", "nixl", True, "pd", True, NIXL_CONV, "NixlConnector = NixlPullConnector"),
        ConnectorRule("NixlPullConnector", "nixl", True, "pd", True, NIXL_CONV),
        ConnectorRule("NixlPushConnector", "nixl", True, "pd", True, NIXL_CONV),
        ConnectorRule(
            "MooncakeConnector",
            "mooncake.mooncake_connector",
            True,
            "pd",
            True,
            _c("mooncake/mooncake_connector.py", "723", "class MooncakeConnector(..., SupportsHMA)"),
            "GDN tested upstream, Mamba2 not validated (mooncake_connector.py:953-954)",
        ),
        ConnectorRule(
            "MooncakeStoreConnector",
            "mooncake.store.connector",
            True,
            "offload",
            True,
            _c("mooncake/store/connector.py", "127-152", "MambaSpec needs mamba_cache_mode align"),
        ),
        ConnectorRule(
            "MoRIIOConnector",
            "moriio.moriio_connector",
            True,
            "pd",
            True,
            _c("moriio/moriio_connector.py", "271-305", "class MoRIIOConnector(..., SupportsHMA)"),
        ),
        ConnectorRule(
            "MultiConnector",
            "multi_connector",
            True,
            "other",
            True,
            _c("multi_connector.py", "133", "HMA only if every child supports it"),
        ),
        ConnectorRule(
            "DecodeBenchConnector",
            "decode_bench_connector",
            True,
            "other",
            False,
            _c("decode_bench_connector.py", "138", "benchmark filler: moves no state"),
        ),
        ConnectorRule(
            "ExampleHiddenStatesConnector",
            "example_hidden_states_connector",
            True,
            "other",
            False,
            _c("example_hidden_states_connector.py", "99", "hidden states, not KV"),
        ),
        ConnectorRule(
            "HiSparseConnector",
            "hisparse.connector",
            True,
            "other",
            False,
            _c("hisparse/connector.py", "221", "HiSparse host pool"),
        ),
    )
}
