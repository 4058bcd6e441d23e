"""Launches vLLM 0.33.0 refuses at start-up over the tensor-parallel width (hazard KVD114).

vLLM's counterpart of ``core/sglang/refusals.py``'s ``launch_refusals`` (SGLang, KVD014): a well-formed
launch the server itself will not start is a finding, reported beside the rest of the analysis with
vLLM's own message and the file and lines that raise it (``rules.TP_HEADS``, ``rules.TP_KV_HEADS``);
malformed input, by contrast, is exit 2 where it enters. vLLM stops at the first; each one that
applies is listed.
"""

from __future__ import annotations

from kvdoctor.core.config import ModelConfig
from kvdoctor.core.record import record
from kvdoctor.core.vllm import rules
from kvdoctor.core.vllm.flags import VllmFlags


@record(frozen=True)
class VllmRefusal:
    """One start-up refusal vLLM would raise for this launch: its message and where it raises."""

    message: str  # vLLM's own words
    where: rules.Cite
    context: str = ""  # what the numbers in it are, when vLLM's words do not say

    def __str__(self) -> str:
        return f'"{self.message}"{self.context} ({self.where})'


def _count(cfg: ModelConfig, key: str) -> int:
    value = cfg.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def total_kv_heads(cfg: ModelConfig) -> int:
    """``ModelConfig.get_total_num_kv_heads``: ``num_key_value_heads``, else the attention heads."""
    return _count(cfg, "num_key_value_heads") or _count(cfg, "num_attention_heads")


def launch_refusals(cfg: ModelConfig, flags: VllmFlags, *, mla: bool, attention: bool) -> tuple[VllmRefusal, ...]:
    """Every refusal of ``--tensor-parallel-size`` against CFG's heads (MLA: latent KV, one head, no KV
    split; ATTENTION: the model has attention layers whose QKV projection is split over TP)."""
    tp = flags.tensor_parallel_size
    if tp <= 1:
        return ()
    found: list[VllmRefusal] = []
    heads = _count(cfg, "num_attention_heads")  # getattr(hf_text_config, "num_attention_heads", 0)
    if heads % tp:
        found.append(VllmRefusal(rules.TP_HEADS_MESSAGE.format(heads=heads, tp=tp), rules.TP_HEADS))
    kv = total_kv_heads(cfg)
    if attention and not mla and kv > 0:
        numerator, denominator = (tp, kv) if tp >= kv else (kv, tp)  # replicate KV heads, or split them
        if numerator % denominator:
            message = rules.TP_KV_HEADS_MESSAGE.format(numerator=numerator, denominator=denominator)
            split = "replicated over" if tp >= kv else "split over"
            context = f": the {kv} KV heads {split} --tensor-parallel-size {tp}"
            found.append(VllmRefusal(message, rules.TP_KV_HEADS, context))
    return tuple(found)
