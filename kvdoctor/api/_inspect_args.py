"""``inspect``'s options, each declared once (``kvdoctor.core.declared``): ``kvdoctor inspect``'s options and
:func:`kvdoctor.api.inspect`'s keyword arguments are made from :class:`InspectArgs`' fields. Read at ``inspect``'s
start-up, so a ``record``."""

from __future__ import annotations

from pathlib import Path

from kvdoctor.core.declared import argument, option
from kvdoctor.core.record import record
from kvdoctor.core.servers import DEFAULT_SERVER
from kvdoctor.engines import GPU_ARCH_HELP, Engine, GpuArch, Server

__all__ = ["InspectArgs"]


@record(frozen=True)
class InspectArgs:
    """An ``inspect``'s options, each declared once here: ``kvdoctor inspect``'s options and
    :func:`kvdoctor.api.inspect`'s keyword arguments are made from these fields (``kvdoctor.core.declared``)."""

    model: str = argument(help="config.json path, model directory, bundled fixture or cached Hub id.")
    strict: bool = option(False, "--strict", help="Exit 1 when any error-severity hazard is found.")
    request_tokens: int = option(2048, "--request-tokens", min=1, help="Tokens per request (forecast).")
    concurrent: int = option(128, "--concurrent", min=1, help="Requests in flight for the retraction forecast.")
    junit_path: Path | None = option(None, "--junit", help="Write JUnit XML: one case per hazard.")
    engine: Engine | str = option(
        Engine.KVDOCTOR,
        "--engine",
        help="Who answers: kvdoctor's rule model alone, or also the installed SGLang, shown beside it.",
    )
    gpu_arch: GpuArch | str = option(GpuArch.SM100, "--gpu-arch", help=GPU_ARCH_HELP)
    server: Server | str = option(
        DEFAULT_SERVER,
        "--server",
        help="Which server the flags are for: sglang (default) or vllm (vLLM 0.33 flags and groups).",
    )
    server_args: tuple[str, ...] = ()  # the server's flags (what follows MODEL on the command line)
