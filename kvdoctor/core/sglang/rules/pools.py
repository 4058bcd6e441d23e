"""Pools and their CPU copies (``srt/mem_cache/memory_pool.py``, ``swa_memory_pool.py``): the
request-to-token pools, and what each pool's CPU copy carries."""

from __future__ import annotations

from kvdoctor.core.sglang.rules.citations import cite

# The request-to-token pool: a decode server builds the decode variants (the hybrid one subclasses
# HybridReqToTokenPool), everything else the plain or hybrid pool.
REQ_POOL_SOURCE = cite("srt/mem_cache/kv_cache_configurator.py", "_build_req_to_token_pool", 1571, 1601)
REQ_POOLS = {  # (decode server, recurrent state) -> class
    (False, False): "ReqToTokenPool",
    (False, True): "HybridReqToTokenPool",
    (True, False): "DecodeReqToTokenPool",
    (True, True): "HybridMambaDecodeReqToTokenPool",
}
HYBRID_REQ_POOLS = frozenset({"HybridReqToTokenPool", "HybridMambaDecodeReqToTokenPool"})
# cpu_copy_carries_mamba: KVCache default False; HybridLinearKVPool True.
CARRIES_MAMBA: dict[str, bool] = {"HybridLinearKVPool": True}
CARRIES_MAMBA_SOURCE = (
    cite("srt/mem_cache/memory_pool.py", "cpu_copy_carries_mamba", 2010),
    cite("srt/mem_cache/memory_pool.py", "cpu_copy_carries_mamba", 4231),
)
MAMBA_BACKUP_SOURCE = cite("srt/managers/schedule_batch.py", "_mamba_pool_needing_backup", 2102)
# The DSA pool's CPU copy carries its index keys (and pooled tail) with the latent rows.
DSA_CPU_COPY_SOURCE = cite("srt/mem_cache/memory_pool.py", "index_k", 5622, 5633)


# The KV offload chunk of every pool's get_cpu_copy.
CPU_OFFLOAD_CHUNK_SOURCE = cite("srt/mem_cache/memory_pool.py", "cpu_offloading_chunk_size", 2043, 2044)
CPU_OFFLOAD_CHUNK = 8192


# KV dtypes whose pool CPU copy carries the block scales: only the MXFP8 pool overrides get_cpu_copy;
# the plain MHA/MLA copies move k/v (or the latent row) only, leaving FP4 scales behind.
CPU_COPY_SCALES_SOURCE = (
    cite("srt/mem_cache/memory_pool.py", "get_cpu_copy", 4131, 4186),
    cite("srt/mem_cache/memory_pool.py", "get_cpu_copy", 2791, 2810),
    cite("srt/mem_cache/memory_pool.py", "get_cpu_copy", 5093, 5111),
)
CPU_COPY_CARRIES_SCALES = frozenset({"mxfp8"})
