"""SGLang's faults for the registry (``kvdoctor.core.faults``): kvdoctor's own model, SGLang's pools, a live server.

kvdoctor's model of SGLang's pools (``kvdoctor roundtrip``) and SGLang's own pool objects (``--engine sglang``) take
the same seven faults, done by ``kvdoctor.state.faults`` and ``kvdoctor.engines.sglang._faults``; a live SGLang
decode server (``kvdoctor consistency --inject``) takes six, installed on the server's pools at the first
retraction backup (``Req.offload_kv_cache``) by ``kvdoctor.engines.sglang.live_faults``. Each hook cites the
SGLang 0.5.23 code it wraps (for the model, the code the model restates); ``tests/engines/sglang/
test_sglang_fault_hooks.py`` opens every cited range in the installed SGLang. Imports nothing heavy.
"""

from __future__ import annotations

from kvdoctor.core.cite import Citations, Cite
from kvdoctor.core.faults import Fault, Needs, Role, StatePath, Target
from kvdoctor.core.sglang.server import FACTS

__all__ = ["FAULTS", "HOOKS"]

HOOKS = Citations("sglang", FACTS.rules_revision)
hook = HOOKS.cite

POOL = "srt/mem_cache/memory_pool.py"
CARRIES_MAMBA = hook(POOL, "cpu_copy_carries_mamba", 2008, 2010)  # KVCache: does the KV pool's copy carry it
HYBRID_COPY = hook(POOL, "get_cpu_copy", 4582, 4602)  # HybridLinearKVPool: its copy carries the recurrent state
WRITE_SCALES = hook(POOL, "_write_scales", 4055, 4071)  # MHATokenToKVPoolMXFP8: the restore writes the scales
SWA_LOAD = hook("srt/mem_cache/swa_memory_pool.py", "load_cpu_copy", 392, 410)  # SWAKVPool: full, then SWA KV
HOST_POOL_RESTORE = hook("srt/disaggregation/decode.py", "restore_kv_cache", 3446, 3453)  # the host_pool backend
MAMBA_LOAD = hook(POOL, "load_cpu_copy", 1223, 1235)  # MambaPool: the recurrent state's restore
KV_LOAD = hook(POOL, "load_cpu_copy", 2813, 2830)  # MHATokenToKVPool: the full-attention KV's restore
OFFLOAD = hook("srt/managers/schedule_batch.py", "offload_kv_cache", 2109, 2128)  # Req: the retraction backup

Row = tuple[Needs, tuple[Cite, ...], str]  # (what it needs, the hooks it wraps, what it does)

# name -> Row: the seven faults of the model and of SGLang's pools.
# How roundtrip's refusal of another engine's fault names this server's faults and who injects them here.
ROUNDTRIP_OWNER = "SGLang's pools"
ROUNDTRIP_INJECTOR = "this engine"  # kvdoctor's model and --engine sglang

_POOL_FAULTS: dict[str, Row] = {
    "missing-mamba": (
        Needs.RECURRENT,
        (CARRIES_MAMBA,),
        "the caller trusts the KV pool to carry recurrent state it does not carry",
    ),
    "double-mamba": (
        Needs.RECURRENT,
        (HYBRID_COPY,),
        "the pool and the caller both copy the recurrent state (bytes agree; the ledger does not)",
    ),
    "drop-block-scale": (Needs.BLOCK_SCALES, (WRITE_SCALES,), "the MXFP8 payload moves without its E8M0 block scales"),
    "drop-swa": (Needs.SWA, (SWA_LOAD,), "the backup moves the full-attention KV but not the sliding-window KV"),
    "host-pool-on-ssm": (
        Needs.RECURRENT,
        (CARRIES_MAMBA, HOST_POOL_RESTORE),
        "the host_pool backend (full and SWA KV only) on a recurrent-state model",
    ),
    "restore-order": (Needs.RECURRENT, (MAMBA_LOAD,), "KV made visible before the recurrent state is restored"),
    "clobber-padding": (Needs.ANY, (KV_LOAD,), "the restore writes a padded row into the reserved padding slot 0"),
}
# name -> Row: the faults inside a live decode server.
_LIVE_FAULTS: dict[str, Row] = {
    "missing-mamba": (
        Needs.RECURRENT,
        (CARRIES_MAMBA,),
        "the KV pool's CPU copy leaves the recurrent state behind while the caller trusts it",
    ),
    "double-mamba": (Needs.RECURRENT, (HYBRID_COPY,), "the pool and the caller both copy the recurrent state"),
    "host-pool-on-ssm": (
        Needs.RECURRENT,
        (CARRIES_MAMBA, HOST_POOL_RESTORE),
        "the backup moves KV pages only (no recurrent-state sidecar)",
    ),
    "restore-order": (
        Needs.RECURRENT,
        (MAMBA_LOAD,),
        "the recurrent state is loaded one restore late (after the request ran again)",
    ),
    "drop-swa": (Needs.SWA, (SWA_LOAD,), "the restore brings the full-attention KV back but not the sliding-window KV"),
    "drop-kv": (Needs.KV, (KV_LOAD,), "the restore brings nothing of the full-attention KV back"),
}


def _records(table: dict[str, Row], target: Target, role: Role, *via: Cite) -> list[Fault]:
    return [
        Fault(name, "sglang", target, StatePath.RETRACTION, role, (*cites, *via), does, needs)
        for name, (needs, cites, does) in table.items()
    ]


# The live faults on the other state paths, one tuple per path, each record whole (its own role, hooks, replays):
# installed by the module ``kvdoctor.engines.sglang.server_hooks.FAULT_MODULES`` names for its path.
TRANSFER_FAULTS: tuple[Fault, ...] = ()  # the PD transfer: prefill's send, decode's receive and commit
HIT_FAULTS: tuple[Fault, ...] = ()  # a radix-cache hit: the cached state a request resumes from
WINDOW_FAULTS: tuple[Fault, ...] = ()  # sliding-window eviction

FAULTS: tuple[Fault, ...] = (
    *_records(_POOL_FAULTS, Target.MODEL, Role.ANY),
    *_records(_POOL_FAULTS, Target.ENGINE, Role.ANY),
    *_records(_LIVE_FAULTS, Target.SERVER, Role.DECODE, OFFLOAD),
    *TRANSFER_FAULTS,
    *HIT_FAULTS,
    *WINDOW_FAULTS,
)
