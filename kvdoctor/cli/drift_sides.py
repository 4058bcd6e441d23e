"""What ``kvdoctor drift --server S`` holds kvdoctor's rules against: one :class:`DriftSide` per server.

A side names the engine that is the installed server's own code (the other side of every cell) and runs
its ``--all-architectures`` set. ``kvdoctor.cli.drift`` reaches a side through one line of its
``SIDES`` table (``kvdoctor.core.servers.lookup``) and never asks which server it was given; a third
server is one more side here (or in its own module) and one more line there. Nothing here imports a
server: each side imports its engine's module inside the call, after ``require`` found the server installed.
"""

from __future__ import annotations

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


class SglangSide:
    """The installed SGLang (``kvdoctor.engines.sglang.drift``), told the GPU it runs on."""

    def adapter(self) -> Adapter:
        return require(Engine.SGLANG, Capability.DRIFT)

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
        from kvdoctor.engines.sglang.drift import run_all_architectures  # only after require(): SGLang is here

        return run_all_architectures(
            cases, gpu_arch, update, output_dir=output_dir, model_types=model_types, strict=strict
        )


class VllmSide:
    """The installed vLLM (``kvdoctor.engines.vllm.drift``); its compared answers take no platform."""

    def adapter(self) -> Adapter:
        return require(Engine.VLLM, Capability.DRIFT)

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
        from kvdoctor.engines.vllm.drift import run_all_architectures  # only after require(): vLLM is here

        return run_all_architectures(cases, update, output_dir=output_dir, model_types=model_types, strict=strict)


SGLANG: DriftSide = SglangSide()
VLLM: DriftSide = VllmSide()
