"""The vLLM engine adapter: the installed vLLM answers ``inspect --server vllm`` beside the rule model.

``_runtime`` is the one door into vLLM (import one module, configure it); ``inspect`` asks vLLM's own spec
classes, ``get_kv_cache_groups`` and connector classes. vLLM answers nothing else (no round trip, no drift
matrix): those commands refuse ``--engine vllm`` with exit 2. Importing this package imports no vLLM.
"""

from __future__ import annotations

from typing import ClassVar

from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.engines import Adapter, Engine, Inspected, InspectQuestion, Server


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


ADAPTER = VllmAdapter()
