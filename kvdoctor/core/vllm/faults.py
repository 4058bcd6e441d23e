"""vLLM's faults for the registry (``kvdoctor.core.faults``): vLLM's offloading worker in-process, a live server.

``kvdoctor roundtrip --engine vllm`` wraps the ``CPUOffloadingWorker`` kvdoctor drives in-process
(``kvdoctor.engines.vllm.roundtrip``); ``kvdoctor consistency --server vllm --inject`` installs a fault inside the
pressured server through kvdoctor's ``vllm.general_plugins`` plugin (``kvdoctor.engines.vllm.server_plugin``). Each
hook cites the vLLM 0.33.0 code it wraps; ``tests/engines/vllm/test_vllm_fault_hooks.py`` opens every cited range in
the installed vLLM. Imports nothing heavy.

``zero-kv`` was called ``drop-kv`` here until the registry; SGLang's ``drop-kv`` (the retraction restore brings no
full-attention KV back) is another fault, so the name went to it alone. ``--server vllm --inject drop-kv`` is still
accepted and does ``zero-kv`` (``Fault.formerly``).
"""

from __future__ import annotations

from kvdoctor.core.cite import Citations, Cite
from kvdoctor.core.faults import Fault, Needs, Role, StatePath, Target
from kvdoctor.core.vllm.server import FACTS

__all__ = ["FAULTS", "HOOKS"]

HOOKS = Citations("vllm", FACTS.rules_revision)
hook = HOOKS.cite

RUNNER = "v1/worker/gpu_model_runner.py"
WORKER = "v1/kv_offload/cpu/gpu_worker.py"
UPDATE_STATES = hook(RUNNER, "_update_states", 1176)  # GPUModelRunner: registers the step's requests and blocks
RESUMED = hook(RUNNER, "resumed_req_ids", 1224)  # the requests the scheduler resumed from preemption
NEW_REQS = hook(RUNNER, "scheduled_new_reqs", 1250)  # the step's new requests (a prefix hit: num_computed_tokens)
SUBMIT_LOAD = hook(WORKER, "submit_load", 883, 893)  # CPUOffloadingWorker: CPU -> GPU through a load handler
SWAP_BLOCKS = hook(WORKER, "_swap_blocks_batch", 706, 712)  # the one call that moves the bytes
FILL_GROUP_OPS = hook(WORKER, "_fill_group_ops", 370, 372)  # SingleDirectionOffloadingHandler: one group's descriptors
ESTIMATE_OPS = hook(WORKER, "_estimate_max_copy_ops", 390)  # the descriptor buffers' size
DIRECT_SRC = hook(WORKER, "group_src", 429, 435)  # _fill_direct_ops: each descriptor's source, block id x page
DIRECT_DST = hook(WORKER, "group_dst", 436, 442)  # _fill_direct_ops: each descriptor's destination, block id x page
NULL_BLOCK = hook("v1/core/block_pool.py", "null_block", 191, 192)  # BlockPool: block 0, never a request's
NULL_BLOCK_ID = hook("v1/attention/backends/utils.py", "NULL_BLOCK_ID", 55)  # the id a positional lookup can land on
OFFLOADING = "distributed/kv_transfer/kv_connector/v1/offloading/"
STORED_WINDOW = hook(  # the connector's SWA window in chunks: vLLM 0.33 widens it by the retained tail (the fix)
    OFFLOADING + "config.py", "extra_retained_tokens", 61, 72
)
LOAD_WINDOW = hook(OFFLOADING + "scheduler.py", "load_window_size_in_chunks", 117, 134)  # the lookup's first window
WINDOW_LOOKUP = hook(OFFLOADING + "scheduler.py", "_sliding_window_lookup", 805, 848)  # a run of stored chunks
RETAINED = hook(  # SlidingWindowManager.get_num_skipped_tokens: the block manager retains the tail below the window
    "v1/core/single_type_kv_cache_manager.py", "extra_retained_tokens", 1180, 1183
)
UNSTORED_CHUNK = hook("v1/kv_offload/cpu/manager.py", "not found in cache", 221, 232)  # prepare_load's assertion
SCALE_WIDENED = hook(  # TritonAttentionBackend.customize_spec: per-token-head cells widened by their fp32 scales
    "v1/attention/backends/triton_attn.py", "state_content_bytes", 308, 319
)


def _offload(name: str, needs: Needs, does: str, *hooks: Cite, replays: tuple[str, ...] = ()) -> Fault:
    return Fault(name, "vllm", Target.ENGINE, StatePath.OFFLOAD, Role.ANY, hooks, does, needs, replays=replays)


def _live(
    name: str, path: StatePath, needs: Needs, does: str, *hooks: Cite, impl: str, formerly: tuple[str, ...] = ()
) -> Fault:
    """A live server's fault; IMPL: the function of kvdoctor's vLLM plugin that installs it."""
    return Fault(name, "vllm", Target.SERVER, path, Role.SINGLE, hooks, does, needs, formerly=formerly, impl=impl)


# How roundtrip's refusal of another engine's fault names this server's faults and who injects them here.
ROUNDTRIP_OWNER = "vLLM's offloading worker (--server vllm --engine vllm)"
ROUNDTRIP_INJECTOR = "--engine vllm"

FAULTS: tuple[Fault, ...] = (
    _offload(
        "drop-group",
        Needs.ANY,
        "the store handler skips the last KV-cache group's copy descriptors",
        FILL_GROUP_OPS,
    ),
    _offload(
        "reorder-blocks",
        Needs.KV,
        "the load spec swaps the first two fresh block ids of the first group that moves two blocks",
        SUBMIT_LOAD,
    ),
    _offload(
        "skip-scales",
        Needs.IN_PAGE_SCALES,
        "the store copies each page's data runs and no scale byte",
        FILL_GROUP_OPS,
        ESTIMATE_OPS,
    ),
    _offload(  # vllm#53084 (fixed by vllm#51358): a Mamba block resolved positionally, NULL_BLOCK_ID stored
        "null-source",
        Needs.RECURRENT,
        "the store reads vLLM's null block (block 0) in place of each Mamba group's block: every byte moves, the "
        "stored state is the null block's",
        FILL_GROUP_OPS,
        DIRECT_SRC,
        NULL_BLOCK,
        NULL_BLOCK_ID,
        replays=("vllm#53084",),
    ),
    _offload(  # vllm#56701 (open RFC; vLLM 0.33 carries the fix in the offloading config and scheduler)
        "swa-short-store",
        Needs.SWA,
        "gives each sliding-window group a multi-module MTP's retained tail and has the offloading connector store "
        "and look up the bare window: the hit loads a chunk never stored (vLLM's CPU manager asserts: exit 3)",
        STORED_WINDOW,
        LOAD_WINDOW,
        WINDOW_LOOKUP,
        RETAINED,
        UNSTORED_CHUNK,
        replays=("vllm#56701",),
    ),
    _offload(  # kvcached#424 (fixed by kvcached#433/#435): get_kv_cache_shape without cache_dtype_str
        "mis-stride",
        Needs.IN_PAGE_SCALES,
        "the load places each page of a group with in-page scales at the un-widened stride (the page without its "
        "fp32 scales), so every page lands at the wrong offset",
        FILL_GROUP_OPS,
        DIRECT_DST,
        SCALE_WIDENED,
        replays=("kvcached#424",),
    ),
    _live(
        "zero-kv",
        StatePath.PREEMPTION,
        Needs.KV,
        "zeroes every attention KV block of a request resumed from preemption, one step later",
        UPDATE_STATES,
        RESUMED,
        formerly=("drop-kv",),
        impl="kvdoctor.engines.vllm.server_plugin:zero_resumed",
    ),
    _live(
        "zero-state",
        StatePath.PREEMPTION,
        Needs.RECURRENT,
        "zeroes the recurrent (Mamba) state blocks of a request resumed from preemption",
        UPDATE_STATES,
        RESUMED,
        impl="kvdoctor.engines.vllm.server_plugin:zero_resumed",
    ),
    _live(
        "drop-prefix",
        StatePath.PREFIX_HIT,
        Needs.KV,
        "zeroes the attention KV blocks a new request got from the prefix cache, before its step",
        UPDATE_STATES,
        NEW_REQS,
        impl="kvdoctor.engines.vllm.server_plugin:drop_prefix",
    ),
    _live(
        "drop-offload",
        StatePath.OFFLOAD,
        Needs.KV,
        "completes every CPU -> GPU load of the offloading worker without copying a byte",
        SUBMIT_LOAD,
        SWAP_BLOCKS,
        impl="kvdoctor.engines.vllm.server_plugin:drop_offload",
    ),
)
