"""Engines: who answers a question about a server's state handling, behind one seam.

``kvdoctor`` answers from kvdoctor's own frozen rule model (``core``) and its own pools (``state``):
fast, torch-free for ``inspect``, and available everywhere. ``sglang`` asks the *installed* SGLang:
its server-argument resolution, its KV-cache configurator, its pool classes, its ``Req`` and its
retraction backup/restore functions, run live. ``vllm`` asks the installed vLLM for its specs, groups
and connectors.

Each engine is an :class:`Adapter` (``engines/own.py`` for kvdoctor's, ``engines/sglang/`` and
``engines/vllm/`` for the servers'): what it can answer (its :class:`Capability` set) and one method
per capability. The CLI asks :func:`load` (or :func:`require`, which refuses a capability the engine
lacks with exit 2) and never names an adapter module: this package is the only door into a server,
and an adapter is imported only when its engine is chosen. A third server gets its own sub-package
beside ``sglang`` and ``vllm`` with the same shape (a runtime that imports and configures the server,
one module per capability) and one line in :data:`_ADAPTERS`; its :class:`Engine` member is made from its
:class:`Server` member (the engines are kvdoctor's and each server's own), and the releases it drives are its
adapter's :attr:`Adapter.supported`.

This module is imported at CLI start-up (the options' enums): it imports no torch, no server and no
adapter.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from enum import Enum
from importlib import util as import_util
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from kvdoctor._exceptions import EngineUnavailable, InputError
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.core.record import record
from kvdoctor.core.servers import DEFAULT_SERVER, Server, add_member, remove_member

if TYPE_CHECKING:
    from kvdoctor.core.drift_result import DriftReport
    from kvdoctor.core.sglang.policy import Platform
    from kvdoctor.roundtrip.options import BenchOptions, ExtraPath, RoundtripOptions
    from kvdoctor.roundtrip.result import RoundtripResult
    from kvdoctor.roundtrip.steps import Progress

__all__ = [
    "Adapter",
    "Capability",
    "Engine",
    "GpuArch",
    "InspectQuestion",
    "Inspected",
    "Server",
    "answers_for",
    "engine_info",
    "load",
    "register",
    "require",
    "unregister",
]


def _engines() -> list[tuple[str, str]]:
    """kvdoctor's own engine first, then one per :class:`Server`, named as the server is (``--engine sglang``)."""
    return [("KVDOCTOR", "kvdoctor"), *((s.name, s.value) for s in Server)]


# Made from Server, so a server's engine is never a second list to keep: kvdoctor, sglang, vllm.
Engine = Enum("Engine", _engines(), type=str, module=__name__, qualname="Engine")  # type: ignore[misc]
Engine.__doc__ = """Who answers (the ``--engine`` option's values): kvdoctor's rule model, or the installed server's
own code."""


GPU_ARCH_HELP = (  # --gpu-arch's help, in every command that takes it
    "The GPU the server runs on: SGLang's defaults (attention backend, page size, MXFP8) depend on it; "
    "with --engine sglang, the platform SGLang is told (a stub)."
)


class GpuArch(str, Enum):
    """The GPU generation the server runs on (``--gpu-arch``); SGLang is told it (a platform stub, see
    ``engines/sglang/_runtime.py``): there may be no GPU here."""

    SM100 = "sm100"  # Blackwell B200/GB200: the MXFP8 KV path needs it
    SM90 = "sm90"  # Hopper H100/H200

    def platform(self) -> Platform:
        """The same GPU for kvdoctor's rule model (``core.sglang.policy.Platform``): both sides see one platform."""
        from kvdoctor.core.sglang.policy import Platform

        return Platform(gpu_arch=self.value)


class Capability(str, Enum):
    """What a command asks an engine for; the value is the command, as its refusal names it."""

    INSPECT = "inspect"  # the server's own answers, beside the rule model's
    ROUNDTRIP = "roundtrip"
    BENCH_ROUNDTRIP = "bench roundtrip"
    DRIFT = "drift"


def engine_info(package: str, not_installed: str) -> EngineRef:
    """PACKAGE's version and location, without importing it; ``EngineUnavailable`` (exit 2) saying
    NOT_INSTALLED (the adapter's sentence, with its install command) when it is not installed."""
    from importlib import metadata  # 20 ms of start-up (email, zipfile, csv): only an engine run reads it

    try:
        version = metadata.version(package)
    except metadata.PackageNotFoundError:
        raise EngineUnavailable(not_installed) from None
    spec = import_util.find_spec(package)
    path = str(Path(spec.origin).parent) if spec and spec.origin else None
    return EngineRef(package, version, path)


# ---- what the capabilities take and give ----------------------------------------------------------
@record(frozen=True)
class InspectQuestion:
    """``inspect``'s question to an engine that answers beside the rule model.

    ``analysis`` is the rule model's answer (``core.sglang.analysis.Analysis`` or
    ``core.vllm.analysis.VllmAnalysis``), None when the rule model refused the input with
    ``kvdoctor_refusal``: the server may still answer, and the refusal is then a disagreement.
    """

    model: str
    server_argv: tuple[str, ...]
    arch: GpuArch
    request_tokens: int
    concurrent: int
    analysis: Any
    kvdoctor_refusal: str | None = None


@record(frozen=True)
class Inspected:
    """One ``inspect`` answer: the typed report, the engine that answered beside kvdoctor (None: the rule
    model alone), how many fields drifted, and notes for stderr (``kvdoctor: note: ...``)."""

    report: Any  # InspectReport | InspectBesideReport | RefusedInspectReport | VllmReport | VllmBesideReport
    engine: EngineRef | None = None
    drifts: int = 0
    notes: tuple[str, ...] = ()


RoundtripRun = Callable[["Progress | None"], "RoundtripResult"]


# ---- the seam ---------------------------------------------------------------------------------------
class Adapter:
    """One engine: what it answers, for which server, and one method per :class:`Capability`.

    An adapter overrides the methods of the capabilities it has (:attr:`capabilities` is exactly
    those); a capability it lacks refuses with the same exit-2 sentence whichever command asks.
    Adapters import their server (and torch) inside the methods, never at import.
    """

    engine: ClassVar[Engine]
    title: ClassVar[str]  # how a sentence names it (``SGLang``, ``vLLM``)
    server: ClassVar[Server | None]  # the server it answers for; None: every server (kvdoctor's rule model)
    first_step: ClassVar[str] = "import torch"  # what a progress bar names before the work's first step

    _METHODS: ClassVar[dict[Capability, str]] = {
        Capability.INSPECT: "beside",
        Capability.ROUNDTRIP: "roundtrip",
        Capability.BENCH_ROUNDTRIP: "bench_paths",
        Capability.DRIFT: "drift",
    }

    @property
    def capabilities(self) -> frozenset[Capability]:
        """The capabilities this adapter's class implements."""
        own = type(self)
        return frozenset(c for c, m in self._METHODS.items() if getattr(own, m) is not getattr(Adapter, m))

    def info(self) -> EngineRef:
        """The engine's name, version and location (``EngineUnavailable`` when it is not installed)."""
        raise NotImplementedError

    @property
    def supported(self) -> tuple[str, str] | None:
        """The releases of its server this engine drives, (first, last) with both ends in, as ``--version`` names
        them; None: the release its rules restate, only. An adapter states it on its class (``supported = (...)``)
        or beside the probes that adapt it, as ``SUPPORTED`` in its package's ``_support`` module (SGLang's), read
        here without importing the server."""
        package = type(self).__module__
        try:
            found = import_util.find_spec(f"{package}._support")
        except ModuleNotFoundError:  # an adapter in a plain module: no package, no _support beside it
            found = None
        return None if found is None else importlib.import_module(f"{package}._support").SUPPORTED

    def beside(self, question: InspectQuestion) -> Inspected:
        """``inspect``: the server's own answers beside the rule model's, each disagreement a drift hazard."""
        raise refusal(self.engine, Capability.INSPECT)

    def roundtrip(
        self,
        model: str,
        server_argv: Sequence[str],
        options: RoundtripOptions,
        *,
        arch: GpuArch,
        emulate_d2h: bool,
    ) -> RoundtripRun:
        """``roundtrip``: check what can be checked without torch now; the returned call runs the round trip."""
        raise refusal(self.engine, Capability.ROUNDTRIP)

    def bench_paths(
        self,
        model: str,
        server_argv: Sequence[str],
        options: BenchOptions,
        arch: GpuArch,
        progress: Progress | None,
    ) -> tuple[list[ExtraPath], dict[str, Any]]:
        """``bench roundtrip``: the engine's own timed paths beside kvdoctor's, and what they used."""
        raise refusal(self.engine, Capability.BENCH_ROUNDTRIP)

    def drift(
        self, fixtures: Sequence[str], cases: Sequence[str], arch: GpuArch, progress: Progress | None
    ) -> DriftReport:
        """``drift``: kvdoctor's rules against the server's own code over every fixture x launch case."""
        raise refusal(self.engine, Capability.DRIFT)


# One line per engine: the module holding its ADAPTER, imported when the engine is first asked for. A third server
# adds its line (or calls register).
_ADAPTERS: dict[Engine | str, str] = {
    Engine.KVDOCTOR: "kvdoctor.engines.own",
    Engine.SGLANG: "kvdoctor.engines.sglang",
    Engine.VLLM: "kvdoctor.engines.vllm",
}


def load(engine: Engine) -> Adapter:
    """ENGINE's adapter (its module is imported now, the server it drives only when a capability runs)."""
    adapter = importlib.import_module(_ADAPTERS[engine]).ADAPTER
    assert isinstance(adapter, Adapter) and adapter.engine is engine
    return adapter


def register(server: Server, module: str) -> Engine:
    """SERVER's engine at run time (a test's fake server, made by ``kvdoctor.core.servers.new_server``): its member
    of :class:`Engine`, made from SERVER's as the others are, and its line in :data:`_ADAPTERS` naming MODULE, whose
    ``ADAPTER`` answers. :func:`unregister` takes both back."""
    engine: Engine = add_member(Engine, server.name, server.value)
    _ADAPTERS[engine] = module
    return engine


def unregister(engine: Engine) -> None:
    """Take back an engine :func:`register` added."""
    _ADAPTERS.pop(engine, None)
    remove_member(Engine, engine.value)


def refusal(engine: Engine, capability: Capability) -> InputError:
    """Exit 2 for an ``--engine`` the command lists (the enum is shared) but that cannot answer it.

    Silently running kvdoctor's own model instead would report a verdict about the wrong system.
    """
    able = " or ".join(e.value for e in Engine if capability in load(e).capabilities)
    lacking = load(engine)
    names = [c.value for c in Capability if c in lacking.capabilities]
    answers = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 2 else names)
    return InputError(
        f"--engine {engine.value}: {capability.value} runs on {able}; {lacking.title} is answered by {answers} only"
    )


def require(engine: Engine, capability: Capability) -> Adapter:
    """ENGINE's adapter when it has CAPABILITY; else exit 2 naming the engines that do."""
    adapter = load(engine)
    if capability not in adapter.capabilities:
        raise refusal(engine, capability)
    return adapter


def answers_for(engine: Engine, server: Server) -> Adapter:
    """ENGINE's adapter when it answers for SERVER's launch lines; else exit 2 naming the fix.

    A server's own code answers as the engine of its name; kvdoctor's rule model answers for every server.
    """
    adapter = load(engine)
    serves = adapter.server
    if serves is not None and serves is not server:
        if server is DEFAULT_SERVER:  # the default server: the user named another server's engine
            fix = f"--server {serves.value}"
            raise InputError(f"--engine {engine.value} answers for {fix} (add {fix})")
        own = Engine(server.value).value
        raise InputError(f"--engine {engine.value} cannot answer for --server {server.value} (use --engine {own})")
    return adapter
