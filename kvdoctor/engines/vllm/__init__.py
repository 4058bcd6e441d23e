"""The vLLM engine adapter: the installed vLLM answers ``inspect --server vllm`` beside the rule model.

``_runtime`` is the one door into vLLM (import one module, configure it); ``inspect`` asks vLLM's own spec
classes, ``get_kv_cache_groups`` and connector classes; ``drift`` asks the same over every vLLM fixture x a
launch matrix (``drift --server vllm``). vLLM answers nothing else (no round trip): those commands refuse
``--engine vllm`` with exit 2. Importing this package imports no vLLM.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.engines import Adapter, Engine, GpuArch, Inspected, InspectQuestion, Server

if TYPE_CHECKING:
    from kvdoctor.core.drift_result import DriftReport
    from kvdoctor.roundtrip.steps import Progress


class VllmAdapter(Adapter):
    engine: ClassVar[Engine] = Engine.VLLM
    title: ClassVar[str] = "vLLM"
    server: ClassVar[Server | None] = Server.VLLM

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


ADAPTER = VllmAdapter()
