"""The retraction backup backend (``srt/mem_cache/kv_cache_builder.py``): when ``host_pool`` is chosen,
how its host pool is sized, and what it carries."""

from __future__ import annotations

from kvdoctor.core.cite import Source
from kvdoctor.core.record import record
from kvdoctor.core.sglang.rules.citations import cite
from kvdoctor.core.sglang.rules.families import USES_SSM_STATE

# "none" keeps no backup: the retracted request is aborted (503).
RETRACTION_BACKUPS_SOURCE = cite("srt/arg_groups/fields/disagg.py", "disaggregation_decode_retraction_backup", 95, 108)


@record(frozen=True)
class BackupCondition:
    """One conjunct of ``host_pool`` selection (resolve_decode_retraction_backup, kv_cache_builder.py
    lines 186-242); every one must hold for host_pool. Each cites its own lines of that function."""

    name: str
    meaning: str
    source: Source


BACKUP_CONDITIONS: tuple[BackupCondition, ...] = (
    BackupCondition(
        "decode_server",
        "--disaggregation-mode decode (others keep cpu_tensor)",
        cite("srt/mem_cache/kv_cache_builder.py", "disaggregation_mode", 230),
    ),
    BackupCondition(
        "not_hip",
        "not a ROCm build (large HIP restores can fault the GPU process)",
        cite("srt/mem_cache/kv_cache_builder.py", "is_hip", 231, 233),
    ),
    BackupCondition(
        "no_dcp", "decode context parallel off", cite("srt/mem_cache/kv_cache_builder.py", "dcp_enabled", 234)
    ),
    BackupCondition(
        "no_decode_radix_cache",
        "--disaggregation-decode-enable-radix-cache off",
        cite("srt/mem_cache/kv_cache_builder.py", "disaggregation_decode_enable_radix_cache", 235),
    ),
    BackupCondition(
        "no_decode_offload",
        "--disaggregation-decode-enable-offload-kvcache off (KV offload already owns a host pool)",
        cite("srt/mem_cache/kv_cache_builder.py", "disaggregation_decode_enable_offload_kvcache", 236, 237),
    ),
    BackupCondition(
        "no_priority_preemption",
        "priority scheduling off, or its preemption disabled",
        cite("srt/mem_cache/kv_cache_builder.py", "priority_preemption", 223, 227),
    ),
    BackupCondition(
        "no_recurrent_state",
        "the model keeps no recurrent/conv state (host_pool has no recurrent-state sidecar)",
        (USES_SSM_STATE, cite("srt/mem_cache/kv_cache_builder.py", "uses_ssm_state", 212, 217)),
    ),
    BackupCondition(
        "no_unified_hybrid_swa",
        "not unified memory on a hybrid-SWA model",
        cite("srt/mem_cache/kv_cache_builder.py", "unified_hybrid_swa", 198),
    ),
    BackupCondition(
        "unified_draft_ok",
        "no unified memory with MTP draft pools (unless DSpark)",
        cite("srt/mem_cache/kv_cache_builder.py", "unified_draft_host_pool_supported", 207, 211),
    ),
    BackupCondition(
        "host_pool_kv_layout",
        "KV pool is an MHATokenToKVPool (subclasses too), or an SWAKVPool with full tokens per layer > 0",
        cite("srt/mem_cache/kv_cache_builder.py", "full_tokens_per_layer", 218, 221),
    ),
)
HOST_POOL_LAYOUTS = ("MHATokenToKVPool", "MHATokenToKVPoolMXFP8", "MHATokenToKVPoolFP4")
BACKUP_ONLY_HICACHE_RATIO = 0.2
DEFAULT_HICACHE_RATIO = 2.0
# A request-to-token row holds the context plus 4 tokens (plus speculative draft tokens, which
# kvdoctor does not model), so decode_retraction_max_tokens' max_context_len - 1 is context + 3: the
# backup-only ratio's floor is sized from it (cited last).
HICACHE_RATIO_SOURCE = (
    cite("srt/mem_cache/kv_cache_builder.py", "BACKUP_ONLY_HICACHE_RATIO", 162, 170),
    cite("srt/mem_cache/kv_cache_builder.py", "hicache_ratio", 244, 260),
    cite("srt/mem_cache/allocation_sizing.py", "get_req_to_token_extra_context_len", 96, 105),
)
REQ_TO_TOKEN_EXTRA = 4
# A server that is not a decode server resolves an unset ratio at start-up: 2.0, or 1.2 when HiCache
# host memory is a buffer only.
NON_DECODE_HICACHE_SOURCE = cite("srt/arg_groups/hicache_hook.py", "handle_hicache_ratio_default", 100, 122)
NON_DECODE_HICACHE_RATIO = 2.0
BUFFER_ONLY_HICACHE_RATIO = 1.2
# What the host_pool backend moves: the unified tree's full and SWA components. Block scales ride
# along only in MHATokenToKVPoolMXFP8Host, chosen for the page-interleaved MXFP8 layout; FP4 and
# flat-layout MXFP8 fall back to the plain MHA host pool.
HOST_POOL_CARRIES = frozenset({"full_kv", "swa_kv", "mla_kv"})
HOST_POOL_SCALES_SOURCE = cite("srt/mem_cache/pool_host/mha.py", "MHATokenToKVPoolMXFP8Host", 1684, 1698)
