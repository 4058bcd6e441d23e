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
from kvdoctor.core.faults import ActsOn, Fault, Needs, Role, StatePath, Target
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


# Every live retraction fault is installed by one function, at the first retraction backup (Req.offload_kv_cache):
# the pool faults through kvdoctor.engines.sglang._faults, drop-kv and retract-raise by live_faults.install itself.
RETRACTION_IMPL = "kvdoctor.engines.sglang.live_faults:hooks"
ALLOCATOR_COPY = hook("srt/mem_cache/allocator/token.py", "get_cpu_copy", 81, 86)  # the allocator asks its pool
NO_CPU_COPY = hook("srt/mem_cache/deepseek_v4_memory_pool.py", "get_cpu_copy", 521, 522)  # the real bug's pool
# The loud live retraction faults (the server dies; the run must exit 3 naming the server's own error line).
LOUD_RETRACTION_FAULTS: tuple[Fault, ...] = (
    Fault(
        "retract-raise",
        "sglang",
        Target.SERVER,
        StatePath.RETRACTION,
        Role.DECODE,
        (OFFLOAD, ALLOCATOR_COPY, NO_CPU_COPY),
        "the KV pool has no CPU copy: the first retraction backup raises NotImplementedError and kills the decode "
        "scheduler",
        Needs.ANY,
        replays=("sglang#33385",),
        switchable=True,
        impl=RETRACTION_IMPL,
    ),
)


def _records(
    table: dict[str, Row],
    target: Target,
    role: Role,
    *via: Cite,
    switchable: frozenset[str] = frozenset(),
    impl: str = "",
) -> list[Fault]:
    return [
        Fault(
            name,
            "sglang",
            target,
            StatePath.RETRACTION,
            role,
            (*cites, *via),
            does,
            needs,
            switchable=name in switchable,
            impl=impl,
        )
        for name, (needs, cites, does) in table.items()
    ]


# The live retraction faults armed and disarmed at run time (a method swapped while armed); the others change the
# pools' attributes or carry a restore over to the next one, so once installed they stay: each gets its own launch.
SWITCHABLE_LIVE = frozenset({"drop-kv"})


# The live faults on the other state paths, one tuple per path, each record whole (its own role, hooks, replays,
# and ``impl``: the function in kvdoctor.engines.sglang that installs it, imported by the site hook).
CONN = "srt/disaggregation/mooncake/conn.py"
SEND_EXTRA = hook(CONN, "maybe_send_extra", 1943, 1949)  # MooncakeKVManager: the state components' send
SEND_EXTRA_CALL = hook(CONN, "maybe_send_extra", 2759, 2766)  # transfer_worker: a request's last chunk sends them
COMMIT = hook("srt/disaggregation/decode.py", "_commit_transfer_to_req", 2600, 2600)  # DecodeTransferQueue
ALLOC_CLEAR = hook(POOL, "mamba_needs_clear", 1592, 1602)  # HybridReqToTokenPool.alloc: a fresh slot is marked
CLEAR_CONSUMER = hook("srt/managers/schedule_batch.py", "_collect_deferred_mamba_cow_and_clear", 3240, 3253)
CLEAR_SLOTS = hook(POOL, "clear_slots", 1147, 1148)  # MambaPool: what the consumer's clear does
TRANSFER_FAULTS: tuple[Fault, ...] = (  # the PD transfer: prefill's send, decode's receive and commit
    Fault(
        "drop-pd-state",
        "sglang",
        Target.SERVER,
        StatePath.TRANSFER,
        Role.PREFILL,
        (SEND_EXTRA, SEND_EXTRA_CALL),
        "the prefill reports the recurrent state sent to the decode without sending it (the KV and the first token "
        "arrive; the decode trusts a state slot nothing wrote)",
        Needs.RECURRENT,
        replays=("sglang#23773",),
        switchable=True,
        impl="kvdoctor.engines.sglang.transfer_faults:drop_pd_state",
        acts_on=ActsOn(
            "reported {n} request(s)' recurrent state sent without sending it (prefill)",
            "the prefill sent no request's state while it was armed",
        ),
    ),
    Fault(
        "clear-pd-state",
        "sglang",
        Target.SERVER,
        StatePath.TRANSFER,
        Role.DECODE,
        (COMMIT, ALLOC_CLEAR, CLEAR_CONSUMER, CLEAR_SLOTS),
        "the decode commits a transfer and then clears the recurrent state it received (the slot stays marked for "
        "clearing, and the clear runs before the first decode step)",
        Needs.RECURRENT,
        replays=("sglang#32995",),
        switchable=True,
        impl="kvdoctor.engines.sglang.transfer_faults:clear_pd_state",
        acts_on=ActsOn(
            "cleared the transferred recurrent state of {n} request(s) after the commit (pressured decode)",
            "the pressured decode committed no transfer while it was armed",
        ),
    ),
)
# A radix-cache hit: the cached recurrent state a request resumes from (kvdoctor.engines.sglang.hit_faults; run by
# ``--scenario prefix-cache`` on one server). The copy-on-write source is set at the match and collected per batch:
MAMBA_COW = hook("srt/mem_cache/unified_cache/components/mamba.py", "finalize_match_result_in_cache", 196, 227)
COLLECT_COW = hook("srt/managers/schedule_batch.py", "_collect_deferred_mamba_cow_and_clear", 3240, 3260)
MAMBA_CHECKPOINT = hook("srt/mem_cache/unified_cache/components/mamba.py", "prepare_for_caching_req", 604, 681)
HIT_FAULTS: tuple[Fault, ...] = (
    Fault(
        "blank-state-on-hit",
        "sglang",
        Target.SERVER,
        StatePath.PREFIX_HIT,
        Role.SINGLE,
        (COLLECT_COW, MAMBA_COW),
        "a radix hit runs its suffix from a blank recurrent state (its copy-on-write turned into a clear) on the "
        "cached prefix's KV (sglang#29368: Mamba2 has_initial_states gated off on a hit; GSM8K collapsed at 20-shot; "
        "fixed by dropping the gate)",
        Needs.RECURRENT,
        replays=("sglang#29368",),
        switchable=True,
        impl="kvdoctor.engines.sglang.hit_faults:blank_state_on_hit",
    ),
    Fault(
        "stale-state-on-hit",
        "sglang",
        Target.SERVER,
        StatePath.PREFIX_HIT,
        Role.SINGLE,
        (COLLECT_COW, MAMBA_COW),
        "a radix hit copies its recurrent state from a slot never written for its prefix (sglang#31474: KDA never "
        "wrote the track snapshots the tree donated, warm-rerun GSM8K 0.150; fixed by writing them)",
        Needs.RECURRENT,
        replays=("sglang#31474",),
        switchable=True,
        impl="kvdoctor.engines.sglang.hit_faults:stale_state_on_hit",
    ),
    Fault(
        "unwritten-checkpoint",
        "sglang",
        Target.SERVER,
        StatePath.PREFIX_HIT,
        Role.SINGLE,
        (MAMBA_CHECKPOINT, COLLECT_COW),
        "the recurrent state a request checkpoints into the radix tree is never written, so later hits restore "
        "garbage (sglang#16053: track fields not passed to the piecewise CUDA graph, GSM8K 0.950 first pass, 0.485 "
        "second; sglang#29973: corrupted seg_la snapshots; both fixed by writing the snapshot)",
        Needs.RECURRENT,
        replays=("sglang#16053", "sglang#29973"),
        switchable=True,
        impl="kvdoctor.engines.sglang.hit_faults:unwritten_checkpoint",
    ),
)
# Sliding-window eviction (kvdoctor.engines.sglang.window_faults): a decoding request past its window frees the SWA
# slots that left it, each step; served on a CPU by an all-SWA model (PureSWARadixCache, runnable.PURE_SWA_ONLY).
EVICT_SWA = hook("srt/managers/schedule_batch.py", "_evict_swa", 4125, 4129)  # ScheduleBatch: one request's eviction
MAYBE_EVICT_SWA = hook("srt/managers/schedule_batch.py", "maybe_evict_swa", 4068, 4099)  # each decode step calls it
FREE_OUT_OF_WINDOW = hook("srt/mem_cache/common.py", "free_swa_out_of_window_slots", 75, 138)  # the frontier it frees
WINDOW_FAULTS: tuple[Fault, ...] = (
    Fault(
        "swa-early-evict",
        "sglang",
        Target.SERVER,
        StatePath.SLIDING_WINDOW,
        Role.SINGLE,
        (EVICT_SWA, MAYBE_EVICT_SWA, FREE_OUT_OF_WINDOW),
        "the sliding-window eviction frees SWA slots still inside the window (half a window early), so the pool "
        "hands them to the next allocation and the request's attention reads another token's KV there (sglang#23982: "
        "the SWA chunk cache committed its eviction on every small advance; sglang#8649: eviction driven by "
        "attention_chunk_size, ignoring the window; users saw silent KV-cache correctness issues; #23982 closed "
        "unmerged, #8649 open)",
        Needs.SWA,
        replays=("sglang#23982",),
        switchable=True,
        impl="kvdoctor.engines.sglang.window_faults:swa_early_evict",
    ),
)

FAULTS: tuple[Fault, ...] = (
    *_records(_POOL_FAULTS, Target.MODEL, Role.ANY),
    *_records(_POOL_FAULTS, Target.ENGINE, Role.ANY),
    *_records(_LIVE_FAULTS, Target.SERVER, Role.DECODE, OFFLOAD, switchable=SWITCHABLE_LIVE, impl=RETRACTION_IMPL),
    *LOUD_RETRACTION_FAULTS,
    *TRANSFER_FAULTS,
    *HIT_FAULTS,
    *WINDOW_FAULTS,
)
