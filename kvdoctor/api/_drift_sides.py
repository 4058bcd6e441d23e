"""What ``kvdoctor drift --server S`` holds kvdoctor's rules against: one :class:`DriftSide` per server.

A side names the engine that is the installed server's own code (the other side of every cell) and runs
its ``--all-architectures`` set. ``kvdoctor.api._drift`` reaches a side through one line of its
``SIDES`` table (``kvdoctor.core.servers.lookup``) and never asks which server it was given; a third
server is one more side here (or in its own module) and one more line there. Nothing here imports a
server: each side imports its engine's module inside the call, after ``require`` found the server installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Protocol

from kvdoctor.engines import Adapter, Capability, Engine, GpuArch, require

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from kvdoctor.core.drift_result import DriftReport

    Progress = Callable[[str, int, int], None]


class DriftSide(Protocol):
    """One server's side of ``drift``: its engine (refused with exit 2 when it cannot drift) and the
    generated set its registry serves (``--all-architectures`` and the options that go with it)."""

    def adapter(self) -> Adapter: ...

    def all_architectures(
        self,
        cases: tuple[str, ...],
        gpu_arch: GpuArch,
        update: Progress | None,
        *,
        output_dir: Path | None,
        model_types: tuple[str, ...],
        strict: bool,
    ) -> DriftReport: ...


@dataclass(frozen=True)
class EngineSide:
    """A server whose engine (``kvdoctor.engines.<engine>.drift``) runs the generated set; PLATFORM: its answers
    are told the GPU they run on (``--gpu-arch``), as SGLang's are; vLLM's compared answers take no platform."""

    engine: Engine
    platform: bool

    def adapter(self) -> Adapter:
        return require(self.engine, Capability.DRIFT)

    def all_architectures(
        self,
        cases: tuple[str, ...],
        gpu_arch: GpuArch,
        update: Progress | None,
        *,
        output_dir: Path | None,
        model_types: tuple[str, ...],
        strict: bool,
    ) -> DriftReport:
        # only after require(): the server is installed here
        run = import_module(f"kvdoctor.engines.{self.engine.value}.drift").run_all_architectures
        platform = (gpu_arch,) if self.platform else ()
        return run(cases, *platform, update, output_dir=output_dir, model_types=model_types, strict=strict)


SGLANG: DriftSide = EngineSide(Engine.SGLANG, platform=True)
VLLM: DriftSide = EngineSide(Engine.VLLM, platform=False)
