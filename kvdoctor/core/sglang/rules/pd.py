"""PD disaggregation (``srt/disaggregation/``): the state types a transfer registers, and what a decode
server's flags declare."""

from __future__ import annotations

from kvdoctor.core.sglang.rules.citations import cite

# Pools whose block scales a PD transfer registers: a top-level MXFP8 pool, and both sub-pools of an
# SWAKVPool (SWAKVPool builds both with the MXFP8 class, even a sub-pool with no layers).
PD_BLOCK_SCALE_POOLS = frozenset({"MHATokenToKVPoolMXFP8"})
PD_BLOCK_SCALE_SOURCE = (
    cite("srt/disaggregation/utils.py", "BLOCK_SCALE", 1513, 1518),
    cite("srt/disaggregation/utils.py", "BLOCK_SCALE_SWA", 1561, 1568),
    cite("srt/mem_cache/swa_memory_pool.py", "full_kv_pool", 96, 106),
)
# A decode host-receive threshold below 1 declares this backend, whatever the flag said (only an
# explicit cpu_tensor is refused).
HOST_RECEIVE_BACKEND = "host_pool"
HOST_RECEIVE_SOURCE = cite(
    "srt/arg_groups/pd_disaggregation_hook.py", "disaggregation_decode_retraction_backup", 68, 80
)
# A decode server without --disaggregation-decode-enable-radix-cache declares disable_radix_cache, which
# the hierarchical-cache check then meets (REFUSALS["hicache_without_radix"]).
DECODE_RADIX_SOURCE = cite("srt/arg_groups/pd_disaggregation_hook.py", "disable_radix_cache", 121, 127)
PD_STATE_TYPES_SOURCE = (
    cite("srt/disaggregation/base/conn.py", "StateType", 14, 41),
    cite("srt/disaggregation/utils.py", "setup_state_kv_args", 1462, 1468),
)
