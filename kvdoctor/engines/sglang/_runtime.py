"""Import the installed SGLang and resolve one launch line with SGLang's own code.

This module is the only door into SGLang. It does what a scheduler process does before it builds
its pools, and nothing more:

1. ``prepare_server_args`` (SGLang's argparse and ``ServerArgs``) on ``--model-path DIR`` plus the
   user's flags, then ``runtime_context.publish`` runs SGLang's resolution pipeline (its hooks,
   overrides and refusals) and projects the config bags every pool reads.
2. ``ModelConfig.from_server_args`` (SGLang's config classes), ``resolve_layer_indices`` and
   ``configure_kv_cache_dtype``: what the model runner knows once the weights are loaded.

Stubs, each listed in :attr:`Runtime.stubs` and printed by every command that uses them:
- platform facts (``runtime_context.override_platform``, SGLang's own override point): a CUDA
  device of the chosen SM generation, because there may be no GPU here;
- ``--device cuda`` on the launch line for the same reason (the pools themselves are built on the
  device kvdoctor runs on);
- no model weights: the model object is ``None`` where SGLang would pass the loaded model (pool
  building only reads its layer range, which then comes from the config).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import os
import shutil
import tempfile
import traceback
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvdoctor._exceptions import EngineRefuses, EngineUnavailable
from kvdoctor.core.config import resolve_config_path
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.core.sglang import rules
from kvdoctor.engines import GpuArch
from kvdoctor.engines import engine_info as installed

INSTALL_HINT = "make sglang-env (then run .venv-sglang/bin/kvdoctor)"
RULES_SGLANG_VERSION = "0.5.23"


def engine_info() -> EngineRef:
    """SGLang's version and location, without importing it (exit 2 with the install command)."""
    return installed("sglang", f"SGLang is not installed in this environment; install it with: {INSTALL_HINT}")


def platform_facts(arch: GpuArch) -> dict[str, Any]:
    """The platform stub: what ``runtime_context.override_platform`` tells SGLang about a CUDA GPU of ARCH."""
    blackwell = arch is GpuArch.SM100
    return {
        "is_cuda": True,
        "is_hip": False,
        "is_npu": False,
        "is_xpu": False,
        "is_musa": False,
        "is_mps": False,
        "is_sm90": not blackwell,
        "is_sm100": blackwell,
        "is_sm100_or_sm110": blackwell,
        "is_sm110": False,
        "is_sm120": False,
        "is_blackwell": blackwell,
        "device_sm": 100 if blackwell else 90,
        "device_capability": (10, 0) if blackwell else (9, 0),
    }


def describe_platform(arch: GpuArch) -> str:
    return "CUDA SM100 (Blackwell)" if arch is GpuArch.SM100 else "CUDA SM90 (Hopper)"


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """SGLang logs and warns at import and resolution time; keep a command's output clean."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            logging.disable(previous)


def import_sglang(module: str) -> Any:
    """Import an SGLang module; any failure names the import that failed and the fix (exit 2)."""
    if not os.environ.get("TRITON_INTERPRET") and not _cuda_available():
        # SGLang's Triton kernels (e.g. the MXFP8 scale store) run on the CPU only interpreted.
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        with quiet():
            return importlib.import_module(module)
    except ImportError as exc:
        missing = getattr(exc, "name", None) or str(exc)
        raise EngineUnavailable(
            f"--engine sglang: importing {module} failed ({type(exc).__name__}: {missing}); "
            f"install the engine environment with: {INSTALL_HINT}"
        ) from None


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def sglang_frame(exc: BaseException) -> str:
    """``file.py:line in function`` of the innermost frame inside SGLang that raised EXC."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f"{os.sep}sglang{os.sep}" in f.filename]
    if not frames:
        return "outside SGLang"
    frame = frames[-1]
    where = frame.filename.split(f"{os.sep}sglang{os.sep}", 1)[1]
    return f"sglang/{where}:{frame.lineno} in {frame.name}"


@dataclass
class Runtime:
    """One resolved launch: SGLang's ServerArgs, ModelConfig and what the model runner would know."""

    info: EngineRef
    server_args: Any
    model_config: Any
    layer_info: Any
    kv_cache_dtype: Any  # torch dtype of the pool
    kv_cache_dtype_str: str
    arch: GpuArch
    stubs: list[str] = field(default_factory=list)
    model_dir: Path | None = None
    _tmp: str | None = None

    def close(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


def _model_dir(model: str) -> tuple[Path, str | None]:
    """A directory holding MODEL's config.json, as SGLang's ``--model-path`` wants it."""
    config = resolve_config_path(model)
    if config.name == "config.json":
        return config.parent, None
    tmp = tempfile.mkdtemp(prefix="kvdoctor-sglang-")
    shutil.copyfile(config, Path(tmp) / "config.json")
    return Path(tmp), tmp


def _refusal(exc: BaseException, what: str) -> EngineRefuses:
    message = " ".join(str(exc).split()) or type(exc).__name__
    return EngineRefuses(f"SGLang {what}: {message} ({sglang_frame(exc)})")


def _stub_device_capability(arch: GpuArch) -> None:
    """DeepSeek DSA's KV-dtype default asks torch for the device generation, not the platform facts:
    answer as the platform stub does (no GPU is consulted)."""
    import torch

    capability = platform_facts(arch)["device_capability"]
    torch.cuda.get_device_capability = lambda *args, **kwargs: capability


def resolve(model: str, server_argv: Sequence[str], arch: GpuArch = GpuArch.SM100) -> Runtime:
    """SGLang's own resolution of MODEL under SERVER_ARGV; its refusals exit 2 with file:line."""
    info = engine_info()
    server_args_mod = import_sglang("sglang.srt.server_args")
    ctx = import_sglang("sglang.srt.runtime_context")
    model_cfg_mod = import_sglang("sglang.srt.configs.model_config")
    layers_mod = import_sglang("sglang.srt.model_executor.model_runner_components.layer_setup")
    kv_dtype_mod = import_sglang("sglang.srt.mem_cache.kv_cache_dtype")

    model_dir, tmp = _model_dir(model)
    argv = ["--model-path", str(model_dir), "--trust-remote-code", "--device", "cuda", *server_argv]
    ctx.override_platform(**platform_facts(arch)).install()
    _stub_device_capability(arch)
    runtime: Runtime | None = None
    try:
        with quiet():
            try:
                server_args = server_args_mod.prepare_server_args(argv)
            except SystemExit:
                line = " ".join(server_argv)
                raise EngineRefuses(f"SGLang's argument parser refuses the launch line: {line}") from None
            try:
                ctx.publish(server_args, role="scheduler")
            except Exception as exc:
                raise _refusal(exc, "refuses this launch at start-up") from None
            try:
                model_config = model_cfg_mod.ModelConfig.from_server_args(server_args)
                layer_info = layers_mod.resolve_layer_indices(
                    model=None, model_config=model_config, is_draft_worker=False
                )
                resolved, dtype = kv_dtype_mod.configure_kv_cache_dtype(
                    server_args_kv_cache_dtype=ctx.get_model().kv_cache_dtype,
                    model=None,
                    model_dtype=model_config.dtype,
                    is_draft_worker=False,
                    is_dflash=False,
                    speculative_draft_attention_backend=None,
                    speculative_draft_kv_cache_dtype=None,
                )
            except Exception as exc:
                raise _refusal(exc, "cannot build this model") from None
        runtime = Runtime(
            info=info,
            server_args=server_args,
            model_config=model_config,
            layer_info=layer_info,
            kv_cache_dtype=dtype,
            kv_cache_dtype_str=resolved if resolved is not None else ctx.get_model().kv_cache_dtype,
            arch=arch,
            stubs=[
                f"platform: {describe_platform(arch)} (runtime_context.override_platform; no GPU is consulted)",
                f"torch.cuda.get_device_capability: {platform_facts(arch)['device_capability']} (DSA's dtype asks)",
                "launch line: --device cuda (the pools are built on kvdoctor's --device)",
                "model weights: none (model=None; layer ranges come from the config)",
                "TP worker: a facade over the built pools for resolve_decode_retraction_backup",
            ],
            model_dir=model_dir,
            _tmp=tmp,
        )
        return runtime
    finally:
        if runtime is None and tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def version_note(info: EngineRef) -> str | None:
    """A sentence when the installed SGLang is not the version kvdoctor's rules restate."""
    if info.version == RULES_SGLANG_VERSION:
        return None
    return f"installed SGLang {info.version} differs from the rules revision ({rules.RULES_REVISION})"


def interpreter_note() -> str | None:
    """Whether SGLang's Triton kernels run interpreted (no CUDA device)."""
    return "Triton kernels interpreted (TRITON_INTERPRET=1)" if os.environ.get("TRITON_INTERPRET") else None
