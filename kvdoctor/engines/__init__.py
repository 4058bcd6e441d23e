"""Engines: who answers a question about a server's state handling.

``kvdoctor`` answers from kvdoctor's own frozen rule model (``core``) and its own pools (``state``):
fast, torch-free for ``inspect``, and available everywhere. ``sglang`` asks the *installed* SGLang:
its server-argument resolution, its KV-cache configurator, its pool classes, its ``Req`` and its
retraction backup/restore functions, run live. An engine adapter is the one place that imports the
server it drives; nothing below the CLI imports an adapter except through :func:`load`.

A second server (vLLM) gets its own sub-package beside ``sglang`` with the same shape: a runtime
that imports and configures the server, and one module per command it can answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from kvdoctor.core.sglang.policy import Platform

__all__ = ["Engine", "EngineInfo", "GpuArch", "Server"]


class Engine(str, Enum):
    """Who answers: kvdoctor's rule model, or the installed server's own code."""

    KVDOCTOR = "kvdoctor"
    SGLANG = "sglang"
    VLLM = "vllm"


class Server(str, Enum):
    """Which inference server a launch line is for (its flags, its rules, its engine)."""

    SGLANG = "sglang"
    VLLM = "vllm"


class GpuArch(str, Enum):
    """The GPU generation SGLang is told it runs on (a platform stub: there may be no GPU here)."""

    SM100 = "sm100"  # Blackwell B200/GB200: the MXFP8 KV path needs it
    SM90 = "sm90"  # Hopper H100/H200

    def facts(self) -> dict[str, Any]:
        blackwell = self is GpuArch.SM100
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

    def platform(self) -> Platform:
        """The same GPU for kvdoctor's rule model (``core.policy.Platform``): both sides see one platform."""
        return Platform(gpu_arch=self.value)

    def describe(self) -> str:
        return "CUDA SM100 (Blackwell)" if self is GpuArch.SM100 else "CUDA SM90 (Hopper)"


@dataclass(frozen=True)
class EngineInfo:
    """The engine that answered: its name, version and where it was imported from."""

    name: str
    version: str
    path: str | None = None
    rules_revision: str | None = None  # the revision kvdoctor's rules restate, when it differs

    def to_json(self) -> dict[str, str | None]:
        return {"name": self.name, "version": self.version, "path": self.path}
