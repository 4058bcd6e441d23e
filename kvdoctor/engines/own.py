"""kvdoctor's own engine: its frozen rule model of SGLang (``core``) and its own pools (``state``).

It answers ``inspect`` for every server by itself (the CLI asks the rule model directly: nothing to put
beside it), and runs ``roundtrip`` and ``bench roundtrip`` on kvdoctor's pools. Nothing here imports a
server; torch is imported only when a round trip runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from kvdoctor import __version__
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.engines import Adapter, Engine, GpuArch, RoundtripRun, Server

if TYPE_CHECKING:
    from kvdoctor.roundtrip.options import BenchOptions, ExtraPath, RoundtripOptions
    from kvdoctor.roundtrip.result import RoundtripResult
    from kvdoctor.roundtrip.steps import Progress


class OwnAdapter(Adapter):
    engine: ClassVar[Engine] = Engine.KVDOCTOR
    title: ClassVar[str] = "kvdoctor"
    server: ClassVar[Server | None] = None

    def info(self) -> EngineRef:
        """kvdoctor at its installed version (the package's own when run from a source tree)."""
        from importlib import metadata  # 20 ms of start-up: only a report that names its engine reads it

        try:
            return EngineRef("kvdoctor", metadata.version("kvdoctor"))
        except metadata.PackageNotFoundError:
            return EngineRef("kvdoctor", __version__)

    def roundtrip(
        self,
        model: str,
        server_argv: Sequence[str],
        options: RoundtripOptions,
        *,
        arch: GpuArch,
        emulate_d2h: bool,
    ) -> RoundtripRun:
        """The rule model's analysis now (pure: a bad launch line is refused before torch loads); the
        returned call checks the run (memory budget included) and runs it on kvdoctor's pools."""
        from kvdoctor.core.sglang.analysis import analyze

        analysis = analyze(model, server_argv, platform=arch.platform())

        def run(progress: Progress | None) -> RoundtripResult:
            from kvdoctor.state.run import check_run, run_roundtrip

            check_run(analysis, options)  # bad input (memory budget included) refused before any work
            return run_roundtrip(analysis, options, progress)

        return run

    def bench_paths(
        self,
        model: str,
        server_argv: Sequence[str],
        options: BenchOptions,
        arch: GpuArch,
        progress: Progress | None,
    ) -> tuple[list[ExtraPath], dict[str, Any]]:
        """kvdoctor's paths are the bench's own: nothing to add."""
        return [], {}


ADAPTER = OwnAdapter()
