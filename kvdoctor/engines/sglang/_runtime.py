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
import os
import shutil
import tempfile
import traceback
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import util as import_util
from pathlib import Path
from typing import Any

from kvdoctor._exceptions import EngineRefuses, EngineUnavailable, InputError, KvdoctorError
from kvdoctor.core.config import resolve_config_path
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.engines import GpuArch
from kvdoctor.engines import engine_info as installed
from kvdoctor.engines.generated_set import quiet
from kvdoctor.engines.sglang import _support
from kvdoctor.engines.sglang._support import RULES_SGLANG_VERSION

INSTALL_HINT = "make sglang-env (then run .venv-sglang/bin/kvdoctor)"


def engine_info() -> EngineRef:
    """SGLang's version and location, without importing it (exit 2 with the install command, or when the
    installed version is outside the supported range: ``_support.check_version``)."""
    info = installed("sglang", f"SGLang is not installed in this environment; install it with: {INSTALL_HINT}")
    _support.check_version(info.version)
    return info


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


def import_sglang(module: str) -> Any:
    """Import an SGLang module; any failure names the import that failed (exit 2): for the rules' SGLang the
    fix is the engine environment; for another version, that this version cannot be driven, and the range."""
    if not os.environ.get("TRITON_INTERPRET") and not _cuda_available():
        # SGLang's Triton kernels (e.g. the MXFP8 scale store) run on the CPU only interpreted.
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        with quiet():
            return importlib.import_module(module)
    except Exception as exc:  # SGLang's own import failing (ImportError, or its code raising at import): exit 2
        version = engine_info().version
        if isinstance(exc, ImportError):
            missing = getattr(exc, "name", None) or " ".join(str(exc).split())[:200]
        else:
            missing = f"{' '.join(str(exc).split())[:200]} at {sglang_frame(exc)}"
        failed = f"importing {module} failed ({type(exc).__name__}: {missing})"
        if version != RULES_SGLANG_VERSION:
            pins = "docs/sglang-versions.md lists the pins each version needs"
            raise _support.unsupported(version, f"{failed}; {pins}") from None
        raise EngineUnavailable(
            f"--engine sglang: {failed}; install the engine environment with: {INSTALL_HINT}"
        ) from None


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


# SGLang's retraction backup and restore (``mem_cache/common.py``), under the names versions gave them: 0.5.22 and
# later ``backup_kv_cache``/``restore_kv_cache``, 0.5.20 ``retraction_backup``/``retraction_restore`` (same arguments).
_BACKUP_NAMES = ("backup_kv_cache", "retraction_backup")
_RESTORE_NAMES = ("restore_kv_cache", "retraction_restore")


def retraction_functions(command: str) -> tuple[Any, Any]:
    """SGLang's (backup, restore) retraction functions; exit 2 naming them and the version when it has neither,
    because COMMAND drives exactly these."""
    common = import_sglang("sglang.srt.mem_cache.common")
    version = engine_info().version
    try:
        return _support.first_piece(common, _BACKUP_NAMES, version), _support.first_piece(
            common, _RESTORE_NAMES, version
        )
    except _support.Missing as exc:
        raise _support.unsupported(version, f"{command} drives {exc}") from None


_KVDOCTOR_ROOT = Path(__file__).resolve().parents[2]  # the kvdoctor package: its adapter files are not SGLang's


def _sglang_root() -> Path | None:
    """The installed SGLang package's directory (where its frames live), without importing it."""
    spec = import_util.find_spec("sglang")
    return Path(spec.origin).resolve().parent if spec and spec.origin else None


def raised_in_sglang(exc: BaseException) -> bool:
    """Whether any frame of EXC's traceback is in the installed SGLang (else kvdoctor's call itself failed)."""
    root = _sglang_root()
    return root is not None and any(
        Path(f.filename).resolve().is_relative_to(root) for f in traceback.extract_tb(exc.__traceback__)
    )


def api_difference(exc: BaseException, what: str) -> InputError | None:
    """Exit 2 when kvdoctor's own call into another SGLang version than the rules' failed before any SGLang
    code ran (a name or signature that version lacks: an API difference, never a finding about SGLang nor a
    kvdoctor bug); None otherwise."""
    if isinstance(exc, KvdoctorError):
        return None  # kvdoctor's own verdict or refusal, already what it means
    version = engine_info().version
    if version == RULES_SGLANG_VERSION or raised_in_sglang(exc):
        return None
    message = " ".join(str(exc).split())[:200]
    return _support.unsupported(version, f"{what}: {type(exc).__name__}: {message} ({sglang_frame(exc)})")


def sglang_frame(exc: BaseException) -> str:
    """``sglang/file.py:line in function`` of the innermost frame inside SGLang that raised EXC; when no frame
    is SGLang's, kvdoctor's own innermost frame, named as kvdoctor's (``kvdoctor/engines/sglang/...``)."""
    frames = traceback.extract_tb(exc.__traceback__)
    root = _sglang_root()
    for frame in reversed(frames):
        path = Path(frame.filename).resolve()
        if root is not None and path.is_relative_to(root):
            return f"sglang/{path.relative_to(root).as_posix()}:{frame.lineno} in {frame.name}"
    for frame in reversed(frames):
        path = Path(frame.filename).resolve()
        if path.is_relative_to(_KVDOCTOR_ROOT):
            return f"kvdoctor's own {path.relative_to(_KVDOCTOR_ROOT.parent).as_posix()}:{frame.lineno} in {frame.name}"
    return "outside SGLang"


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


def _loop_model_layers(layers_mod: Any, model_config: Any) -> Any:
    """The layer range a loop model's class declares, for ``resolve_layer_indices`` (no model is built).

    Without a model SGLang takes the range ``[0, max(layers, attention layers))``, which for a loop model
    (Nanbeige, IQuestLoopCoder: ``ModelConfig.num_attention_layers`` is layers x loops) is already unrolled,
    and then multiplies it by the loop count again. Their model classes declare their physical layers,
    ``[0, num_hidden_layers)`` at PP 1 (``models/nanbeige.py`` ``make_pp_layers``, ``models/iquest_loopcoder.py``).
    Every other model: None, as before."""
    loops = getattr(layers_mod, "_get_loop_num", None)
    if loops is None or loops(model_config.hf_config) <= 1:
        return None
    return types.SimpleNamespace(start_layer=0, end_layer=int(model_config.num_hidden_layers))


def resolve(model: str, server_argv: Sequence[str], arch: GpuArch = GpuArch.SM100) -> Runtime:
    """SGLang's own resolution of MODEL under SERVER_ARGV; its refusals exit 2 with file:line."""
    info = engine_info()
    server_args_mod = import_sglang("sglang.srt.server_args")
    ctx = import_sglang("sglang.srt.runtime_context")
    model_cfg_mod = import_sglang("sglang.srt.configs.model_config")
    layers_mod = import_sglang("sglang.srt.model_executor.model_runner_components.layer_setup")
    kv_dtype_mod = import_sglang("sglang.srt.mem_cache.kv_cache_dtype")
    spec_info = import_sglang("sglang.srt.speculative.spec_info")

    model_dir, tmp = _model_dir(model)
    argv = ["--model-path", str(model_dir), "--trust-remote-code", "--device", "cuda", *server_argv]
    facts, unknown = _support.fitted_facts(platform_facts(arch), _support.known_platform_facts(ctx))
    ctx.override_platform(**facts).install()
    _stub_device_capability(arch)
    runtime: Runtime | None = None
    try:
        with quiet():
            said = io.StringIO()  # argparse prints its whole usage on stderr before it exits: keep its last line
            try:
                with contextlib.redirect_stderr(said):
                    server_args = server_args_mod.prepare_server_args(argv)
            except SystemExit:
                line = " ".join(server_argv)
                why = said.getvalue().strip().splitlines()[-1:] or [""]
                because = f" ({' '.join(why[0].split())[:300]})" if why[0] else ""
                raise EngineRefuses(f"SGLang's argument parser refuses the launch line: {line}{because}") from None
            try:
                ctx.publish(server_args, role="scheduler")
            except Exception as exc:
                raise _refusal(exc, "refuses this launch at start-up") from None
            try:
                model_config = model_cfg_mod.ModelConfig.from_server_args(server_args)
                layer_info = _support.fitted_call(
                    layers_mod.resolve_layer_indices,
                    info.version,
                    model=_loop_model_layers(layers_mod, model_config),
                    model_config=model_config,
                    is_draft_worker=False,
                    spec_algorithm=spec_info.SpeculativeAlgorithm.from_string(None),
                )
                resolved, dtype = _support.fitted_call(
                    kv_dtype_mod.configure_kv_cache_dtype,
                    info.version,
                    server_args_kv_cache_dtype=ctx.get_model().kv_cache_dtype,
                    model=None,
                    model_dtype=model_config.dtype,
                    is_draft_worker=False,
                    is_dflash=False,
                    speculative_draft_attention_backend=None,
                    speculative_draft_kv_cache_dtype=None,
                )
            except _support.Missing as exc:
                raise _support.unsupported(info.version, f"resolving a launch needs {exc}") from None
            except Exception as exc:
                different = api_difference(exc, "resolving a launch failed in kvdoctor's call")
                raise different or _refusal(exc, "cannot build this model") from None
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
                *(
                    [f"platform facts SGLang {info.version} does not know, not passed: {', '.join(unknown)}"]
                    if unknown
                    else []
                ),
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
    return _support.differs_note(info.version)


def interpreter_note() -> str | None:
    """Whether SGLang's Triton kernels run interpreted (no CUDA device)."""
    return "Triton kernels interpreted (TRITON_INTERPRET=1)" if os.environ.get("TRITON_INTERPRET") else None
