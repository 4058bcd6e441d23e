"""``roundtrip``: retract requests on real pools, reuse their slots, restore, diff every state component bitwise."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvdoctor.api._arguments import checked
from kvdoctor.api._job import ErrorCase, Job, chosen, execute, flags
from kvdoctor.api._servers import room, server_of
from kvdoctor.choices import Device
from kvdoctor.core.servers import DEFAULT_SERVER, rule_model
from kvdoctor.engines import Capability, Engine, GpuArch, Server, answers_for, require

if TYPE_CHECKING:
    from kvdoctor.core.launch_line import LaunchLine
    from kvdoctor.report.roundtrip_report import Report
    from kvdoctor.roundtrip.result import RoundtripResult

# (update) -> result: the work, run under a progress display by the CLI, directly by the API.
Work = Callable[[Any], "RoundtripResult"]


class RoundtripJob(Job["RoundtripResult", "Report"]):
    """One round trip of MODEL with GIVEN (:func:`roundtrip`'s keyword arguments); EXPLICIT names the options the
    caller set (an option only another server's round trip reads is refused, not ignored); OWN_OPTIONS are the
    caller's own option spellings (a did-you-mean over them for a stray server flag)."""

    def __init__(
        self,
        model: str,
        given: Mapping[str, Any],
        *,
        explicit: frozenset[str] = frozenset(),
        own_options: Sequence[str] = (),
    ) -> None:
        self.model, self.given, self.explicit, self.own_options = model, dict(given), explicit, tuple(own_options)
        self.engine = chosen(Engine, given["engine"], "engine")
        self.server = server_of(given["server"])  # a Server, or a registered server's name (its tables answer)
        self.junit_path = given.get("junit_path")
        inject = given.get("inject")
        self.settings = dict(
            device=chosen(Device, given["device"], "device").value,
            requests=int(given["requests"]),
            tokens=int(given["tokens"]),
            seed=int(given["seed"]),
            inject=getattr(inject, "value", inject),
        )

    def check(self) -> None:
        """Which engine runs which server's round trip, and only the options and faults it acts on (exit 2)."""
        answers_for(self.engine, self.server)  # --engine vllm for SGLang's flags, --engine sglang for vLLM's
        room(self.server).roundtrip_side.check(self)  # what its engine would not act on

    def error_case(self) -> ErrorCase:
        from kvdoctor.report.roundtrip_report import SUITE, title

        return ErrorCase(SUITE, title(self.model), self.junit_path)

    def launch_line(self) -> LaunchLine:
        """MODEL and the server flags, read by the server's own flag table (its rule model's)."""
        words = [self.model, *flags(self.given.get("server_args"))]
        return rule_model(self.server).launch_line(words, self.own_options)

    def prepare(self) -> tuple[Work, str]:
        """The work (bad input refused now, before torch is imported) and the name of its first step."""
        from kvdoctor.roundtrip.options import Reductions, RoundtripOptions, check_options

        adapter = require(self.engine, Capability.ROUNDTRIP)
        self.line = line = self.launch_line()
        reductions = Reductions(layers=self.given.get("layers"), heads=self.given.get("heads"))
        options = RoundtripOptions(**self.settings, reductions=reductions)
        check_options(options)  # every engine's round trip: its bounds, before the engine imports torch
        arch = chosen(GpuArch, self.given["gpu_arch"], "gpu_arch")
        work = adapter.roundtrip(
            line.model, line.server_argv, options, arch=arch, emulate_d2h=bool(self.given["emulate_d2h"])
        )
        return work, adapter.first_step

    def work(self) -> RoundtripResult:
        work, _ = self.prepare()
        return work(None)

    def report(self, result: RoundtripResult) -> Report:
        from kvdoctor.report.roundtrip_report import Report

        return Report(result, self.line.model)


@checked
def roundtrip(
    model: str,
    *,
    device: Device | str = Device.AUTO,
    requests: int = 8,
    tokens: int = 256,
    seed: int = 0,
    inject: str | None = None,
    layers: int | None = None,
    heads: int | None = None,
    junit_path: Path | None = None,
    engine: Engine | str = Engine.KVDOCTOR,
    server: Server | str = DEFAULT_SERVER,
    gpu_arch: GpuArch | str = GpuArch.SM100,
    emulate_d2h: bool = False,
    server_args: str | Sequence[str] = (),
) -> Report:
    """``kvdoctor roundtrip MODEL [options] SERVER_ARGS``: retract requests on real pools (kvdoctor's model of
    SGLang's, the installed SGLang's, or vLLM's offloading worker), let others reuse their slots, restore, and diff
    every state component bitwise. Returns the run's report (``passed``, ``verdict``, ``explain()``, ``to_json()``;
    its ``result`` is the typed :class:`~kvdoctor.roundtrip.result.RoundtripResult`). Bad input raises
    :class:`kvdoctor.InputError` (or another ``kvdoctor._exceptions`` class) before any work."""
    given = dict(locals())
    return execute(RoundtripJob(model, given, explicit=not_default(roundtrip, given)))


def not_default(function: Callable[..., Any], given: Mapping[str, Any]) -> frozenset[str]:
    """The keyword arguments of FUNCTION whose GIVEN value is not its default (what a caller set)."""
    from inspect import signature

    params = signature(function).parameters.values()
    return frozenset(p.name for p in params if p.default is not p.empty and given.get(p.name, p.default) != p.default)
