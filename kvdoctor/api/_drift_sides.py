"""The side ``kvdoctor drift --server S`` holds kvdoctor's rules against when it is the installed server's engine.

A :class:`EngineSide` names the engine that is the installed server's own code (the other side of every cell) and
runs its ``--all-architectures`` set; each server's room (``api/_server_<server>.py``) makes its own, and
``kvdoctor.api._drift`` reaches it through ``kvdoctor.api._servers`` without asking which server it was given.
Nothing here imports a server: the engine's module is imported inside the call, after ``require`` found the server
installed.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from kvdoctor.core.record import record
from kvdoctor.engines import Adapter, Capability, Engine, GpuArch, require

if TYPE_CHECKING:
    from pathlib import Path

    from kvdoctor.api._servers import Progress
    from kvdoctor.core.drift_result import DriftReport


@record(frozen=True)
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
