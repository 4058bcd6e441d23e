"""Which models SGLang 0.5.23 cannot run on a CPU, measured, each with the file:line that stops it.

Refused before anything starts (exit 2, ``NotRunnableHere``): a deployment that is known to die at
import would only burn minutes and end in exit 3. The families come from kvdoctor's rule model
(``kvdoctor.core.sglang.families``); the reasons and places were measured on SGLang 0.5.23 with
``SGLANG_USE_CPU_ENGINE=1`` (``/work/shared/reference/real-servers-on-cpu.md``). On a GPU nothing here
applies.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvdoctor._exceptions import NotRunnableHere
from kvdoctor.core.cite import Cite

MAMBA2 = (
    "its Mamba2 layers need causal_conv1d_fn, defined only for CUDA/NPU/XPU",
    Cite("sglang", "srt/layers/attention/mamba/mamba.py", "causal_conv1d_fn", 43, 75),
)
GDN = (
    "its gated-delta-net layers need four sgl_kernel.mamba CPU ops (no CPU build of sgl-kernel is installed)",
    Cite("sglang", "srt/layers/attention/linear/gdn_backend.py", "sgl_kernel.mamba", 183, 188),
)
KDA = (
    "its KDA layers import sgl_kernel.mamba CPU ops (no CPU build of sgl-kernel is installed)",
    Cite("sglang", "srt/layers/attention/linear/kda_backend.py", "sgl_kernel.mamba", 39, 39),
)
INKLING = (
    "its model module imports CUDA-only kernel libraries (cutlass, quack), so SGLang skips it, and its override "
    "forces the mamba extra_buffer strategy, which asserts platform support for state snapshots; LFM2 (ShortConv "
    "state and attention, like Inkling's) is the nearest model that runs",
    Cite("sglang", "srt/arg_groups/mamba_hook.py", "_platform_supports_mamba_cache_extra_buffer", 120, 120),
)
NOT_ON_CPU: dict[str, tuple[str, Cite]] = {
    "nemotron_h": MAMBA2,
    "falcon_h1": MAMBA2,
    "granite_hybrid": MAMBA2,
    "zaya": MAMBA2,
    "mamba2": MAMBA2,
    "mamba1": MAMBA2,
    "gdn": GDN,
    "jet_gdn": GDN,
    "kda": KDA,
    "inkling": INKLING,
}


@dataclass(frozen=True)
class ModelKind:
    family: str
    has_recurrent: bool
    has_swa: bool


def classify(config: dict[str, object], source: str) -> ModelKind:
    import json

    from kvdoctor.core.config import parse_config
    from kvdoctor.core.sglang.families import classify as families_classify

    cls = families_classify(parse_config(json.dumps(config), source))
    return ModelKind(cls.family, cls.uses_ssm_state, cls.is_hybrid_swa)


def check_cpu(kind: ModelKind, model: str) -> None:
    """Refuse a model SGLang cannot run on CPU, naming SGLang's file and lines."""
    if kind.family in NOT_ON_CPU:
        reason, where = NOT_ON_CPU[kind.family]
        raise NotRunnableHere(
            f"{model} ({kind.family}) does not run on SGLang's CPU path: {reason} (sglang/{where.path}:{where.lines}); "
            "use --device cuda, or a model whose layers SGLang runs on CPU (dense attention, LFM2 ShortConv)"
        )
