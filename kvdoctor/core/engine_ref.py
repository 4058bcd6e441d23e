"""Who answered a question: kvdoctor's own rule model and pools, or an installed server's own code.

One type for every place that names the engine: the ``engine`` key of every ``--json`` report's
header (``kvdoctor.report.envelope.RunHeader``), the engine ``inspect --engine sglang`` shows beside
kvdoctor (its ``sglang.engine`` key), the engine a round trip or a drift run used, and what an engine
adapter reports about the server it drives (``kvdoctor.engines.engine_info``). Pure data (no torch).
"""

from __future__ import annotations

from kvdoctor.core.record import record

__all__ = ["EngineRef"]


@record(frozen=True)
class EngineRef:
    """The engine that answered: ``kvdoctor``, ``sglang`` or ``vllm``, its version and where it was imported from.

    ``version`` is None where it is unknown (a server reached over HTTP that did not say); ``path`` is None
    for kvdoctor itself and wherever the server's location is not known.
    """

    name: str
    version: str | None
    path: str | None = None
