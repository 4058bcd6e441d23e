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
# Refused by architecture where the family alone does not decide (gpt-oss is a hybrid sliding-window model, as the
# all-SWA configs SGLang serves on CPU are). Measured: `kvdoctor consistency gpt-oss-20b --shrink` died at start-up
# with SGLang's own AssertionError, before any weight was loaded.
GPT_OSS = (
    "SGLang asserts an attention backend with sliding windows and attention sinks (triton, trtllm_mha, fa3, fa4, "
    "ascend, intel_amx, intel_xpu, aiter), and the CPU path's torch_native has no sinks; sliding-window eviction "
    "runs on CPU with an all-SWA model (every layer_types entry sliding_attention)",
    Cite("sglang", "srt/arg_groups/model_hook.py", "GptOssForCausalLM", 536, 543),
)
NOT_ON_CPU_ARCH: dict[str, tuple[str, Cite]] = {"GptOssForCausalLM": GPT_OSS}
# A hybrid sliding-window model (full and sliding layers: two sub-pools, SWATokenToKVPoolAllocator) keeps each sliding
# layer's KV in the SWA sub-pool at translated slots (torch_native_backend.py:52-57, written at 298-301), but
# torch_native reads every layer at the request's full-pool slots. Measured (`kvdoctor consistency` on a shrunk Laguna
# with layers sliding, full, sliding, full): the pressured server died at its first decodes, "IndexError: index 410 is
# out of bounds for dimension 0 with size 410" (a full-pool slot read from the 409-token SWA sub-pool); below the
# sub-pool's size the same reads return another slot's KV silently. An all-SWA config has one pool whose slots are
# its own (PureSWATokenToKVPoolAllocator), and Gemma-2/3 run without the SWA pool (SGLang disables it for them).
HYBRID_SWA = (
    "its sliding-window layers keep their KV in SGLang's SWA sub-pool, but torch_native reads it at the full pool's "
    "slots (no full-to-SWA translation on read; measured: IndexError at the first decodes); an all-SWA config "
    "(every layer_types entry sliding_attention) runs",
    Cite("sglang", "srt/layers/attention/torch_native_backend.py", "per_req_tokens", 240, 241),
)


@dataclass(frozen=True)
class ModelKind:
    family: str
    has_recurrent: bool
    has_swa: bool
    architectures: tuple[str, ...] = ()
    all_swa: bool = False  # every attention layer sliding (SGLang's all-SWA pool and PureSWARadixCache)


def classify(config: dict[str, object], source: str) -> ModelKind:
    import json

    from kvdoctor.core.config import parse_config
    from kvdoctor.core.sglang.families import classify as families_classify

    cls = families_classify(parse_config(json.dumps(config), source))
    archs = config.get("architectures")
    names = tuple(str(a) for a in archs) if isinstance(archs, list) else ()
    return ModelKind(cls.family, cls.uses_ssm_state, cls.is_hybrid_swa, names, _all_sliding(config))


def _all_sliding(config: dict[str, object]) -> bool:
    """Whether the language model's ``layer_types`` (top level or ``text_config``) name only sliding layers."""
    text = config.get("text_config")
    kinds = (text if isinstance(text, dict) else config).get("layer_types") or config.get("layer_types")
    return isinstance(kinds, list) and bool(kinds) and all(k == "sliding_attention" for k in kinds)


def check_cpu(kind: ModelKind, model: str) -> None:
    """Refuse a model SGLang cannot run on CPU, naming SGLang's file and lines."""
    if kind.family in NOT_ON_CPU:
        reason, where = NOT_ON_CPU[kind.family]
        raise NotRunnableHere(
            f"{model} ({kind.family}) does not run on SGLang's CPU path: {reason} (sglang/{where.path}:{where.lines}); "
            "use --device cuda, or a model whose layers SGLang runs on CPU (dense attention, LFM2 ShortConv)"
        )
    for arch in (a for a in kind.architectures if a in NOT_ON_CPU_ARCH):
        reason, where = NOT_ON_CPU_ARCH[arch]
        raise NotRunnableHere(
            f"{model} ({arch}) does not run on SGLang's CPU path: {reason} (sglang/{where.path}:{where.lines}); "
            "use --device cuda"
        )
    if kind.has_swa and not kind.all_swa:
        reason, where = HYBRID_SWA
        raise NotRunnableHere(
            f"{model} (hybrid sliding-window) does not run on SGLang's CPU path: {reason} "
            f"(sglang/{where.path}:{where.lines}); use --device cuda"
        )
