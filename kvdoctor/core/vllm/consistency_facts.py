"""vLLM's part of ``kvdoctor consistency``'s shared modules (:mod:`kvdoctor.core.consistency_facts`)."""

from __future__ import annotations

from kvdoctor.core.consistency_facts import ConsistencyFacts
from kvdoctor.core.paths import StatePath

__all__ = ["FACTS", "MAMBA_STATE"]

# --shrink: a Mamba2 state (NemotronH's fields, the ones kvdoctor's vLLM state model reads) of 8 heads x 16 x 16 in
# 1 group: 10,112 B in float32 (conv 3 x 160 + SSM 8 x 16 x 16), within one 32-token attention page (2 KV heads x
# (32 + 32) x 4 B x 32 = 16,384 B), so vLLM keeps a 32-token attention block (``Platform._align_hybrid_block_size``
# raises the block until one page holds a whole state); 8 x 16 = the shrunk hidden 128. NemotronH's too.
MAMBA_STATE = {"mamba_num_heads": 8, "mamba_head_dim": 16, "ssm_state_size": 16, "n_groups": 1}

FACTS = ConsistencyFacts(
    mamba_state=MAMBA_STATE,
    shrinks_untied_mamba=True,
    pressed="preempted",
    pressure_consequence="no request was ever resumed from preemption",
    fault_site="inside pressured (kvdoctor's vllm.general_plugins plugin on {hook})",
    fault_hooks={StatePath.OFFLOAD: "CPUOffloadingWorker.submit_load", "": "GPUModelRunner._update_states"},
    fault_tally="installed {installed}, fired on {restores} {on}",
    fault_problem="failed",
)
