"""Configs SGLang loads but cannot build pools for (exit 2, naming the missing field)."""

from __future__ import annotations

from kvdoctor.core.cite import Cite
from kvdoctor.core.record import record
from kvdoctor.core.sglang.rules.citations import cite
from kvdoctor.core.sglang.rules.layers import GDN_INTERVAL_FIELD, GDN_INTERVAL_SOURCE


@record(frozen=True)
class Unbuildable:
    """A config SGLang loads but cannot build pools for, and the field that would fix it."""

    field: str
    why: str
    source: Cite


UNBUILDABLE: dict[str, Unbuildable] = {
    "gdn_interval": Unbuildable(
        GDN_INTERVAL_FIELD, "Qwen3NextConfig.layers_block_type reads it (no default)", GDN_INTERVAL_SOURCE
    ),
    "mamba2_intermediate": Unbuildable(
        "intermediate_size",
        "Mamba2Config.mamba2_cache_params reads it (transformers no longer derives it from expand)",
        cite("srt/configs/mamba2.py", "intermediate_size", 40, 48),
    ),
    "lfm2_no_conv": Unbuildable(
        "layer_types",
        "Lfm2Config.mamba2_cache_params is None without a conv / "
        "short_conv layer, yet mamba2_config still marks the model recurrent",
        cite("srt/configs/lfm2.py", "conv_layer_ids", 67, 69),
    ),
}
