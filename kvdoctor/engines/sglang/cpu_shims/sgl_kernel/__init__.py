"""kvdoctor's import-only stand-in for ``sgl_kernel`` (SGLang's CUDA/CPU kernel package), for CPU runs.

Every name imported from it (``from sgl_kernel import x``, ``sgl_kernel.mamba.y``) and every
``torch.ops.sgl_kernel.<op>`` SGLang looks up without probing is a placeholder that **raises when
called**, naming itself, after appending its name to the file named by ``$KVDOCTOR_STANDIN_LOG``, so
a run can prove afterwards that none was called (all the work was SGLang's own code). The names SGLang
probes with ``hasattr`` to choose a kernel path are left out, so those probes say no:
``convert_weight_packed`` makes ``cpu_has_amx_support()`` False (``srt/utils/common.py:354-372``), and
RMSNorm, activations and RoPE take their ``forward_native`` paths.

This is not SGLang's package and does none of its work; kvdoctor puts it on a server's path only when
the real one is absent and the device is CPU, and says so in the report.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import types
from typing import Any, NoReturn

__version__ = "0.0.0+kvdoctor.standin"
KVDOCTOR_STANDIN = True
LOG_ENV = "KVDOCTOR_STANDIN_LOG"

# torch.ops.sgl_kernel names SGLang 0.5.23 looks up as attributes (``torch.ops.sgl_kernel.<name>``, some at
# import time) and never probes: each is a placeholder here. Every other name is absent, in particular the ones
# SGLang probes with hasattr() or register_fake_if_exists("sgl_kernel::<name>") to choose a kernel path (e.g.
# convert_weight_packed for AMX, srt/utils/common.py:358; gptq_marlin_repack, layers/quantization/gptq/gptq.py:670):
# answering those would send SGLang down a path this stand-in cannot run. Regenerate from the installed SGLang:
#   attribute names minus probed names (tests/consistency/test_stand_in.py checks it against the source).
PLACEHOLDER_OPS = frozenset(
    {
        "apply_multidimensional_rope_cpu",
        "apply_rotary_pos_emb_cpu",
        "biased_grouped_topk_cpu",
        "bmm_cpu",
        "causal_conv1d_weight_pack",
        "conv3d_embed_cpu",
        "conv3d_embed_weight_pack",
        "convert_scale_packed",
        "convert_weight_packed_scale_zp",
        "decode_attention_cpu",
        "deepseek_v4_topk_transform_512",
        "dsv4_fused_q_indexer_rope_hadamard_quant",
        "extend_attention_cpu",
        "flash_attn_varlen_func",
        "fp8_per_tensor_scaled_mm_cpu",
        "fp8_scaled_mm_cpu",
        "fused_add_rmsnorm_cpu",
        "fused_dual_residual_rmsnorm_cpu",
        "fused_experts_cpu",
        "fused_gdn_gating_cpu",
        "fused_input_proj_cpu",
        "fused_linear_sigmoid_mul",
        "fused_moe_router_cpu",
        "fused_norm_scale_shift_cpu",
        "fused_qk_gemma_rmsnorm_cpu",
        "fused_qk_gemma_rmsnorm_with_gate_cpu",
        "fused_qk_rmsnorm_apply_from_stats_cpu",
        "fused_qk_rmsnorm_cpu",
        "fused_qk_rmsnorm_sumsq_cpu",
        "fused_qkvzba_split_reshape_cat_contiguous_cpu",
        "fused_qkvzba_split_reshape_cat_cpu",
        "fused_rmsnorm_gated_cpu",
        "fused_scale_residual_norm_scale_shift_cpu",
        "fused_scale_shift_cpu",
        "fused_sigmoid_gating_delta_rule_update_cpu",
        "fused_sigmoid_mul_cpu",
        "gelu_and_mul_cpu",
        "gelu_tanh_and_mul_cpu",
        "gemma3_rmsnorm_cpu",
        "gemma4_rmsnorm_cpu",
        "gemma_fused_add_rmsnorm_cpu",
        "gemma_rmsnorm_cpu",
        "grouped_topk_cpu",
        "image_preprocess_cpu",
        "init_cpu_threads_env",
        "initialize",
        "int4_scaled_mm_cpu",
        "int8_scaled_mm_with_quant",
        "l2norm_cpu",
        "layernorm_cpu",
        "multimodal_rotary_embedding_cpu",
        "murmur_hash32_cpu",
        "qkv_proj_with_rope_fused_weight",
        "query_device",
        "rmsnorm_cpu",
        "rotary_embedding",
        "rotary_embedding_cpu",
        "shared_expert_cpu",
        "shm_allgather",
        "shm_allreduce",
        "shm_alltoall",
        "silu_and_mul_cpu",
        "store_cache_cpu",
        "topk_sigmoid_cpu",
        "topk_softmax_cpu",
        "topk_transform",
        "topk_transform_paged",
        "topk_transform_ragged",
        "weight_packed_linear",
    }
)


class StandInCalled(RuntimeError):
    """A stand-in function was called: the run used kvdoctor's placeholder, not SGLang's code."""


def _record(name: str) -> None:
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()} {name}\n")
    except OSError:
        pass


class Placeholder:
    """A name of the stand-in: importable, never callable."""

    def __init__(self, name: str) -> None:
        self.__name__ = self.__qualname__ = name.rsplit(".", 1)[-1]
        self._kvdoctor_name = name

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        _record(self._kvdoctor_name)
        raise StandInCalled(
            f"{self._kvdoctor_name} was called, but sgl_kernel here is kvdoctor's import-only stand-in "
            "(no CPU build of sgl-kernel is installed); this code path needs the real package"
        )

    def __getattr__(self, attr: str) -> Placeholder:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Placeholder(f"{self._kvdoctor_name}.{attr}")

    def __repr__(self) -> str:
        return f"<kvdoctor stand-in {self._kvdoctor_name}>"


def _module_getattr(module_name: str) -> Any:
    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        return Placeholder(f"{module_name}.{name}")

    return __getattr__


__getattr__ = _module_getattr(__name__)


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``sgl_kernel.<anything>`` imports as another stand-in module."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(__name__ + "."):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__path__ = []  # a package, so deeper submodules import too
        module.__getattr__ = _module_getattr(spec.name)  # type: ignore[method-assign]
        module.KVDOCTOR_STANDIN = True  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class _OpsNamespace(types.ModuleType):
    """Stands for ``torch.ops.sgl_kernel``: the names of :data:`PLACEHOLDER_OPS` are placeholders, no other exists."""

    def __getattr__(self, name: str) -> Any:
        if name not in PLACEHOLDER_OPS:
            raise AttributeError(f"torch.ops.sgl_kernel has no op {name!r} (kvdoctor stand-in)")
        return Placeholder(f"torch.ops.sgl_kernel.{name}")


def _install_ops() -> None:
    try:
        import torch
    except ImportError:
        return
    torch.ops.sgl_kernel = _OpsNamespace("torch.ops.sgl_kernel")  # type: ignore[attr-defined]


if not any(isinstance(f, _Submodules) for f in sys.meta_path):
    sys.meta_path.insert(0, _Submodules())
_install_ops()
