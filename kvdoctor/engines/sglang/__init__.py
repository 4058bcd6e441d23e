"""The SGLang engine adapter: the installed SGLang answers ``inspect`` beside the rule model, runs
``roundtrip`` and ``bench roundtrip`` on its own pools and retraction code, and is ``drift``'s other side.

``_runtime`` is the one door into SGLang (import, resolve one launch line, the platform stubs); one module
per capability (``inspect``, ``roundtrip``, ``bench``, ``drift``) and the pieces they share (``_pools``,
``_planes``, ``_instruments``, ``_faults``). The server-side hooks (``server_hooks``, ``live_faults``,
``site_hook/``, ``cpu_shims/``) run inside a real SGLang server process, not through this adapter.
Importing this package imports neither SGLang nor torch: each method imports what it runs, after :meth:`info` has
found SGLang installed (a missing SGLang is one line in a third of a second, not after torch's import).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.engines import Adapter, Engine, GpuArch, Inspected, InspectQuestion, RoundtripRun, Server

if TYPE_CHECKING:
    from kvdoctor.core.drift_result import DriftReport
    from kvdoctor.roundtrip.options import BenchOptions, ExtraPath, RoundtripOptions
    from kvdoctor.roundtrip.result import RoundtripResult
    from kvdoctor.roundtrip.steps import Progress


class SglangAdapter(Adapter):
    engine: ClassVar[Engine] = Engine.SGLANG
    title: ClassVar[str] = "SGLang"
    server: ClassVar[Server | None] = Server.SGLANG
    first_step: ClassVar[str] = "import torch and SGLang"

    def info(self) -> EngineRef:
        from kvdoctor.engines.sglang import _runtime

        return _runtime.engine_info()

    def beside(self, question: InspectQuestion) -> Inspected:
        self.info()  # installed (else exit 2 naming make sglang-env), before torch is imported
        from kvdoctor.engines.sglang.inspect import inspect_beside

        return inspect_beside(question)

    def roundtrip(
        self,
        model: str,
        server_argv: Sequence[str],
        options: RoundtripOptions,
        *,
        arch: GpuArch,
        emulate_d2h: bool,
    ) -> RoundtripRun:
        """The round trip on the installed SGLang (imported when the returned call runs, never before; found
        installed now)."""
        self.info()

        def run(progress: Progress | None) -> RoundtripResult:
            from kvdoctor.engines.sglang.roundtrip import EngineOptions, run_roundtrip

            engine = EngineOptions(arch=arch, emulate_d2h=emulate_d2h)
            return run_roundtrip(model, list(server_argv), options, engine, progress)

        return run

    def bench_paths(
        self,
        model: str,
        server_argv: Sequence[str],
        options: BenchOptions,
        arch: GpuArch,
        progress: Progress | None,
    ) -> tuple[list[ExtraPath], dict[str, Any]]:
        """SGLang's own backup_kv_cache/restore_kv_cache, timed in the same rounds as kvdoctor's paths."""
        self.info()
        from kvdoctor.engines.sglang.bench import sglang_path

        if progress:
            progress("import SGLang and build its pools", 0, 0)
        path, used = sglang_path(model, list(server_argv), options, arch)
        return [path], used

    def drift(
        self, fixtures: Sequence[str], cases: Sequence[str], arch: GpuArch, progress: Progress | None
    ) -> DriftReport:
        self.info()
        from kvdoctor.engines.sglang.drift import run_drift

        return run_drift(fixtures, cases, arch, progress)


ADAPTER = SglangAdapter()
