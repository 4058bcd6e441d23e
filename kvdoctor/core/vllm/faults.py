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


def _offload(name: str, needs: Needs, does: str, *hooks: Cite) -> Fault:
    return Fault(name, "vllm", Target.ENGINE, StatePath.OFFLOAD, Role.ANY, hooks, does, needs)


def _live(name: str, path: StatePath, needs: Needs, does: str, *hooks: Cite, formerly: tuple[str, ...] = ()) -> Fault:
    return Fault(name, "vllm", Target.SERVER, path, Role.SINGLE, hooks, does, needs, formerly=formerly)


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
    _live(
        "zero-kv",
        StatePath.PREEMPTION,
        Needs.KV,
        "zeroes every attention KV block of a request resumed from preemption, one step later",
        UPDATE_STATES,
        RESUMED,
        formerly=("drop-kv",),
    ),
    _live(
        "zero-state",
        StatePath.PREEMPTION,
        Needs.RECURRENT,
        "zeroes the recurrent (Mamba) state blocks of a request resumed from preemption",
        UPDATE_STATES,
        RESUMED,
    ),
    _live(
        "drop-prefix",
        StatePath.PREFIX_HIT,
        Needs.KV,
        "zeroes the attention KV blocks a new request got from the prefix cache, before its step",
        UPDATE_STATES,
        NEW_REQS,
    ),
    _live(
        "drop-offload",
        StatePath.OFFLOAD,
        Needs.KV,
        "completes every CPU -> GPU load of the offloading worker without copying a byte",
        SUBMIT_LOAD,
        SWAP_BLOCKS,
    ),
)
