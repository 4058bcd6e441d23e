"""``roundtrip``: retract requests on real pools, reuse their slots, restore, diff every state component bitwise."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvdoctor.api._job import ErrorCase, Job, chosen, execute
from kvdoctor.api._keywords import keyword_function
from kvdoctor.api._servers import room, server_of
from kvdoctor.choices import DEVICE_HELP, Device
from kvdoctor.core.declared import argument, declared, option
from kvdoctor.core.faults import roundtrip_names
from kvdoctor.core.servers import DEFAULT_SERVER, rule_model
from kvdoctor.engines import GPU_ARCH_HELP, Capability, Engine, GpuArch, Server, answers_for, require
from kvdoctor.report.roundtrip_report import SUITE, Report, title
from kvdoctor.roundtrip.options import Reductions, RoundtripOptions, check_options

if TYPE_CHECKING:
    from kvdoctor.core.launch_line import LaunchLine
    from kvdoctor.roundtrip.result import RoundtripResult

# (update) -> result: the work, run under a progress display by the CLI, directly by the API.
Work = Callable[[Any], "RoundtripResult"]


@dataclass(frozen=True)
class RoundtripArgs:
    """A round trip's options, each declared once here: ``kvdoctor roundtrip``'s options and
    :func:`kvdoctor.api.roundtrip`'s keyword arguments are made from these fields (``kvdoctor.core.declared``)."""

    model: str = argument(help="config.json path, model directory, bundled fixture or cached Hub id.")
    device: Device | str = option(Device.AUTO, "--device", help=DEVICE_HELP)
    requests: int = option(8, "--requests", min=2, help="Requests admitted; half are retracted.")
    tokens: int = option(256, "--tokens", min=2, help="Longest request (seqlen); lengths vary down to half.")
    seed: int = option(0, "--seed", help="Seed for lengths, retracted set and data.")
    inject: str | None = option(
        None,
        "--inject",
        help="Reproduce a known failure; the components it must turn red are checked (inject_matched). "
        f"--engine vllm: {', '.join(roundtrip_names(Server.VLLM))}; the others: SGLang's.",
    )
    layers: int | None = option(
        None, "--layers", min=1, help="Reduce: at most N layers per sub-pool (--engine vllm: per KV-cache group)."
    )
    heads: int | None = option(None, "--heads", min=1, help="Reduce: at most N KV / recurrent heads.")
    junit_path: Path | None = option(None, "--junit", help="Write JUnit XML: one case per component.")
    engine: Engine | str = option(
        Engine.KVDOCTOR,
        "--engine",
        help="Whose pools and retraction code run: kvdoctor's model of SGLang, the installed SGLang itself, "
        "or (with --server vllm) vLLM's own offloading worker.",
    )
    server: Server | str = option(
        DEFAULT_SERVER,
        "--server",
        help="Which server the flags are for: sglang (default) or vllm (vLLM 0.33 flags; needs --engine vllm).",
    )
    gpu_arch: GpuArch | str = option(GpuArch.SM100, "--gpu-arch", help=GPU_ARCH_HELP)
    emulate_d2h: bool = option(
        False,
        "--emulate-d2h",
        help="--engine sglang: copy backup tensors that alias a live pool, as a device-to-host copy would "
        "(the aliasing row then reports without failing). Never the default.",
    )
    server_args: tuple[str, ...] = ()  # the server's flags (what follows MODEL on the command line)

    def explicit(self) -> frozenset[str]:
        """The options set to something other than their default (what a caller set)."""
        return frozenset(d.keyword for d in declared(RoundtripArgs) if getattr(self, d.path[0]) != d.default)


class RoundtripJob(Job["RoundtripResult", "Report"]):
    """One round trip of ARGS; EXPLICIT names the options the caller set (an option only another server's round
    trip reads is refused, not ignored; None: those not at their default); OWN_OPTIONS are the caller's own option
    spellings (a did-you-mean over them for a stray server flag)."""

    def __init__(
        self, args: RoundtripArgs, *, explicit: frozenset[str] | None = None, own_options: Sequence[str] = ()
    ) -> None:
        self.args, self.own_options = args, tuple(own_options)
        self.explicit = args.explicit() if explicit is None else explicit
        self.model = args.model
        self.engine = chosen(Engine, args.engine, "engine")
        self.server = server_of(args.server)  # a Server, or a registered server's name (its tables answer)
        self.junit_path = args.junit_path
        self.options = RoundtripOptions(  # what the engine is asked to do
            device=chosen(Device, args.device, "device").value,
            requests=args.requests,
            tokens=args.tokens,
            seed=args.seed,
            inject=getattr(args.inject, "value", args.inject),
            reductions=Reductions(layers=args.layers, heads=args.heads),
        )

    def check(self) -> None:
        """Which engine runs which server's round trip, and only the options and faults it acts on (exit 2)."""
        answers_for(self.engine, self.server)  # --engine vllm for SGLang's flags, --engine sglang for vLLM's
        room(self.server).roundtrip_side.check(self)  # what its engine would not act on

    def error_case(self) -> ErrorCase:
        return ErrorCase(SUITE, title(self.model), self.junit_path)

    def launch_line(self) -> LaunchLine:
        """MODEL and the server flags, read by the server's own flag table (its rule model's)."""
        words = [self.model, *self.args.server_args]
        return rule_model(self.server).launch_line(words, self.own_options)

    def prepare(self) -> tuple[Work, str]:
        """The work (bad input refused now, before torch is imported) and the name of its first step."""
        adapter = require(self.engine, Capability.ROUNDTRIP)
        self.line = line = self.launch_line()
        options = self.options
        check_options(options)  # every engine's round trip: its bounds, before the engine imports torch
        arch = chosen(GpuArch, self.args.gpu_arch, "gpu_arch")
        work = adapter.roundtrip(line.model, line.server_argv, options, arch=arch, emulate_d2h=self.args.emulate_d2h)
        return work, adapter.first_step

    def work(self) -> RoundtripResult:
        work, _ = self.prepare()
        return work(None)

    def report(self, result: RoundtripResult) -> Report:
        from kvdoctor.report.roundtrip_report import Report

        return Report(result, self.line.model)


roundtrip = keyword_function(
    RoundtripArgs,
    lambda args: execute(RoundtripJob(args)),
    name="roundtrip",
    module=__name__,
    doc="""``kvdoctor roundtrip MODEL [options] SERVER_ARGS``: retract requests on real pools (kvdoctor's model of
    SGLang's, the installed SGLang's, or vLLM's offloading worker), let others reuse their slots, restore, and diff
    every state component bitwise. Returns the run's report (``passed``, ``verdict``, ``explain()``, ``to_json()``;
    its ``result`` is the typed :class:`~kvdoctor.roundtrip.result.RoundtripResult`). Bad input raises
    :class:`kvdoctor.InputError` (or another ``kvdoctor._exceptions`` class) before any work.""",
    flags_into="server_args",
)
