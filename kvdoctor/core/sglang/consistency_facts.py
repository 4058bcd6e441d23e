"""SGLang's part of ``kvdoctor consistency``'s shared modules (:mod:`kvdoctor.core.consistency_facts`)."""

from __future__ import annotations

from kvdoctor.core.consistency_facts import ConsistencyFacts
from kvdoctor.core.paths import ActsOn, StatePath

__all__ = ["FACTS", "MAMBA_STATE"]

# --shrink: 8 heads x 32 (expand 2: 8 x 32 = 2 x the shrunk hidden 128), state 64, 1 group. SGLang sizes its Mamba
# pool apart from its KV pages, so the state may stay this large, and a NemotronH (Mamba width tied to nothing)
# keeps its full-size state: a real-size state is what its pool then holds.
MAMBA_STATE = {"mamba_num_heads": 8, "mamba_head_dim": 32, "ssm_state_size": 64, "n_groups": 1}

FACTS = ConsistencyFacts(
    mamba_state=MAMBA_STATE,
    shrinks_untied_mamba=False,
    pressed="retracted",
    pressure_consequence="no state was ever backed up and restored",
    fault_site="inside {hook}",
    fault_hooks={
        "": "decode-pressured (site hook on Req.offload_kv_cache)",
        StatePath.TRANSFER: "the role its record names, armed for the pressured burst only (site hook on the "
        "prefill's MooncakeKVManager.maybe_send_extra or decode-pressured's DecodeTransferQueue."
        "_commit_transfer_to_req)",
        StatePath.PREFIX_HIT: "pressured, armed for its burst only (site hook on ScheduleBatch._collect_deferred_"
        "mamba_cow_and_clear, or MambaComponent.prepare_for_caching_req for unwritten-checkpoint)",
    },
    fault_tally="installed {installed}, {backups} backups and {restores} restores through it",
    fault_problem="refused",
    # SGLang's radix-hit faults change a hit's (or a checkpoint's) recurrent state, not vLLM's cached blocks
    fault_words={
        StatePath.PREFIX_HIT: ActsOn(
            "changed the recurrent state of {n} radix-cache hit(s) or checkpoint(s)",
            "no request hit a cached recurrent state, or was checkpointed, while it was armed",
        )
    },
)
