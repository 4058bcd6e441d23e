"""The only door into vLLM: import it (one-line exit-2 errors naming the import and the fix) and configure it.

vLLM is installed in its own environment (``make vllm-env``: ``.venv-vllm/``, torch 2.13.0 CPU,
``vllm==0.33.0 --no-deps`` plus what the imported modules need). Nothing here touches a GPU: the
modules used (``v1/kv_cache_interface.py``, ``v1/core/kv_cache_planning.py``, the mamba state
calculators, the connector factory and offloading config) are pure bookkeeping over specs.
"""

from __future__ import annotations

import importlib
import logging
import os
from types import ModuleType
from typing import Any

from kvdoctor._exceptions import EngineUnavailable
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.engines import engine_info as installed

INSTALL_HINT = "make vllm-env (then run .venv-vllm/bin/kvdoctor)"


def engine_info(asked_by: str = "--engine vllm") -> EngineRef:
    """vLLM's version and location, without importing it (``EngineUnavailable`` naming ASKED_BY, the option
    that needs vLLM, and the install command)."""
    return installed("vllm", f"{asked_by}: vLLM is not installed here; install it with: {INSTALL_HINT}")


_LOADED: dict[str, ModuleType] = {}  # a drift matrix asks thousands of times: logging's setLevel is not free


def load(module: str) -> ModuleType:
    """Import one vLLM module; any failure is one line naming the module, the error and the fix."""
    if module in _LOADED:
        return _LOADED[module]
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    try:
        imported = importlib.import_module(module)
    except Exception as exc:  # ImportError, or a vLLM module that fails while importing on this machine
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise EngineUnavailable(
            f"--engine vllm: importing {module} failed ({type(exc).__name__}: {first}); install with: {INSTALL_HINT}"
        ) from None
    logging.getLogger("vllm").setLevel(logging.ERROR)
    _LOADED[module] = imported
    return imported


def torch_dtype(name: str) -> Any:
    torch = load("torch")
    return {
        "bfloat16": torch.bfloat16,
        "float16": torch.float16,
        "float32": torch.float32,
        "uint8": torch.uint8,
        "int8": torch.int8,
        "float8_e4m3fn": torch.float8_e4m3fn,
        "float8_e5m2": torch.float8_e5m2,
    }[name]


def planning_config(*, hybrid_manager: bool) -> Any:
    """A real ``VllmConfig`` with what ``get_kv_cache_groups`` reads: the hybrid-manager switch and the
    resolved layout (LBNHC, the default preference when FLASH_ATTN declares none; utils.py:228-236)."""
    config = load("vllm.config")
    vllm_config = config.VllmConfig()
    vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = not hybrid_manager
    vllm_config.cache_config.kv_cache_layout = "LBNHC"
    return vllm_config
