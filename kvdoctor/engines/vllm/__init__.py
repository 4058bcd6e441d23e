"""The vLLM engine adapter: the installed vLLM answers ``inspect --server vllm`` beside the rule model.

``_runtime`` is the one door into vLLM (import one module, configure it); ``inspect`` asks vLLM's own spec
classes, ``get_kv_cache_groups`` and connector classes; ``drift`` asks the same over every vLLM fixture x a
launch matrix (``drift --server vllm``); ``roundtrip`` (``roundtrip --server vllm --engine vllm``) has vLLM's
own ``CPUOffloadingWorker`` store every group's blocks and load them into fresh ones (the CPU shims in
``_offload_shims``). ``bench roundtrip`` refuses ``--engine vllm`` with exit 2. Importing this package imports
no vLLM.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from kvdoctor._exceptions import InputError
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.engines import Adapter, Engine, GpuArch, Inspected, InspectQuestion, RoundtripRun, Server

if TYPE_CHECKING:
    from kvdoctor.core.drift_result import DriftReport
    from kvdoctor.roundtrip.options import RoundtripOptions
    from kvdoctor.roundtrip.result import RoundtripResult
    from kvdoctor.roundtrip.steps import Progress


class VllmAdapter(Adapter):
    engine: ClassVar[Engine] = Engine.VLLM
    title: ClassVar[str] = "vLLM"
    server: ClassVar[Server | None] = Server.VLLM
    first_step: ClassVar[str] = "import torch and vLLM"

    def info(self) -> EngineRef:
        from kvdoctor.engines.vllm import _runtime

        return _runtime.engine_info()

    def beside(self, question: InspectQuestion) -> Inspected:
        """vLLM's own answers beside the rule model's; when vLLM cannot be imported, the rule model's report
        says why (and the engine that answered stays kvdoctor)."""
        from kvdoctor.engines.vllm.inspect import inspect_beside

        return inspect_beside(question)

    def drift(
        self, fixtures: Sequence[str], cases: Sequence[str], arch: GpuArch, progress: Progress | None
    ) -> DriftReport:
        """kvdoctor's vLLM rule model against the installed vLLM over every vLLM fixture x launch case
        (ARCH is not used: the compared answers take no platform)."""
        from kvdoctor.engines.vllm.drift import run_drift

        return run_drift(fixtures, cases, progress)

    def roundtrip(
        self,
        model: str,
        server_argv: Sequence[str],
        options: RoundtripOptions,
        *,
        arch: GpuArch,
        emulate_d2h: bool,
    ) -> RoundtripRun:
        """vLLM's offloading worker stores one request's blocks of every group and loads them into fresh ones
        (ARCH and EMULATE_D2H are SGLang's: the CLI refuses them with --engine vllm). The launch line is
        checked now by kvdoctor's vLLM rule model (no torch, no vLLM), so bad input is one line before any
        import; the returned call imports vLLM and runs."""
        from kvdoctor.core.vllm.analysis import analyze_vllm
        from kvdoctor.roundtrip.faults import check_fault
        from kvdoctor.roundtrip.options import check_options

        check_options(options)
        check_fault(options.inject, server=Server.VLLM)
        refused = analyze_vllm(model, list(server_argv)).refusal
        if refused is not None:
            raise InputError(f"vLLM refuses this launch line: {refused}")
        engine = self.info()  # vLLM installed (else exit 2 naming make vllm-env), before the progress bar

        def run(progress: Progress | None) -> RoundtripResult:
            from kvdoctor.engines.vllm.roundtrip import roundtrip_result, run_vllm_roundtrip

            done = run_vllm_roundtrip(
                model,
                list(server_argv),
                tokens=options.tokens,
                seed=options.seed,
                inject=options.inject,
                layers=options.reductions.layers,
                progress=progress,
            )
            return roundtrip_result(done, engine, tokens=options.tokens, seed=options.seed)

        return run


ADAPTER = VllmAdapter()
