"""``kvdoctor sweep``'s options (:class:`SweepOptions`), each declared once (``kvdoctor.core.declared``): the command
is made from its fields and :func:`kvdoctor.api.sweep` takes it. Light: ``kvdoctor --help`` reads it."""

from __future__ import annotations

from pathlib import Path

from kvdoctor._exceptions import InputError
from kvdoctor.consistency.prepared import ConsistencyOptions
from kvdoctor.consistency.workload import Workload
from kvdoctor.core.declared import argument, declared, group, option
from kvdoctor.core.record import record
from kvdoctor.core.servers import DEFAULT_SERVER

__all__ = ["DEFAULT_OUTPUT_DIR", "OVERLAY_ROOT", "SWEEP_WORKLOAD", "SweepOptions", "duration"]

_DURATION = {"s": 1.0, "m": 60.0, "h": 3600.0}


def duration(text: str) -> float:
    """``90``, ``90s``, ``45m``, ``1.5h`` as seconds (exit 2 for anything else): ``--budget``'s parser."""
    unit = text[-1:].lower()
    number = text[:-1] if unit in _DURATION else text
    try:
        seconds = float(number) * _DURATION.get(unit, 1.0)
    except ValueError:
        raise InputError(f"--budget {text}: a duration such as 3600, 90s, 45m or 1.5h") from None
    if not seconds > 0 or seconds != seconds or seconds == float("inf"):
        raise InputError(f"--budget {text}: must be a finite duration > 0")
    return seconds


def consistency_help(keyword: str) -> str:
    """The help of consistency's option KEYWORD, which every cell takes as a consistency run does."""
    return next(d.opt.help for d in declared(ConsistencyOptions) if d.keyword == keyword)


# Small enough that a cell of a shrunk hybrid is about two minutes on 2 CPU cores, big enough that the pressured
# pool (a quarter of the peak demand) still retracts.
SWEEP_WORKLOAD = Workload(requests=12, prompt_tokens=32, max_new_tokens=32, concurrency=12)
DEFAULT_OUTPUT_DIR = Path("kvdoctor-out/sweep")
OVERLAY_ROOT = Path(".overlay")


@record(frozen=True)
class SweepOptions:
    """One sweep: what it runs on (models, server, topology, scenarios), its space and plan, what it does with a red
    cell, and the consistency options every cell shares. Each option is declared once here: ``kvdoctor sweep``'s
    options are made from these fields (``kvdoctor.core.declared``), and :func:`kvdoctor.api.sweep` takes the record."""

    models: tuple[str, ...] = argument(
        help="Models (directory, bundled fixture name or HF id), or `merge` then the --json reports to join."
    )
    server: str = option(
        DEFAULT_SERVER.value, "--server", help="sglang or vllm: whose servers run and whose flags are swept."
    )
    topology: str = option("single", "--topology", help=consistency_help("topology"))
    scenarios: tuple[str, ...] = option(  # (): every scenario the server runs on the topology
        (),
        "--scenario",
        keyword="scenario",
        help="A scenario every configuration runs (repeatable); default: every one the server runs on the topology, "
        "those it cannot listed as refused.",
    )
    space: Path | None = option(  # None: the server's built-in one
        None,
        "--space",
        help="Your own space: a TOML file of [[factor]] tables (docs/sweep.md); default: the server's built-in one.",
    )
    strength: int = option(2, "--strength", help="Every t-tuple of flag values meets in a configuration (2: pairs).")
    budget_s: float | None = option(
        None,
        "--budget",
        keyword="budget",
        help="Stop starting runs after this long (3600, 90m, 1.5h); the report says the coverage reached.",
        parser=duration,
        metavar="DURATION",
    )
    shard: str | None = option(None, "--shard", help="Run share I of N of the plan (1/4): one CI matrix job each.")
    minimize: bool = option(
        True, "--minimize/--no-minimize", help="Repeat, minimize and bisect every red cell (default on)."
    )
    repeats: int = option(1, "--repeat", keyword="repeat", help="Extra runs of a red cell: deterministic or flaky.")
    releases: tuple[str, ...] | None = option(  # None: every overlay present
        None,
        "--release",
        keyword="release",
        help="An older release to bisect over (repeatable; make sglang-overlay VERSION=...); default: every overlay "
        "present.",
    )
    shrink: bool = option(False, "--shrink", help=consistency_help("shrink"))
    device: str = option("cpu", "--device", help=consistency_help("device"))
    inject: str | None = option(
        None, "--inject", help="A fault armed in every cell (kvdoctor faults): where does it show?"
    )
    fault_file: Path | None = option(None, "--fault-file", help=consistency_help("fault_file"))
    workload: Workload = group(Workload, SWEEP_WORKLOAD)
    output_dir: Path = option(
        DEFAULT_OUTPUT_DIR, "--output-dir", help="Every cell's run directory and the checkpoint cache go here."
    )
    timeout_s: float = option(1800.0, "--timeout", keyword="timeout", help="Seconds for each run.")
    overlay_root: Path = OVERLAY_ROOT
    extra_args: tuple[str, ...] = ()  # every server's (reference and subject)

    def base(self, model: str, scenario: str) -> ConsistencyOptions:
        return ConsistencyOptions(
            model=model,
            shrink=self.shrink,
            topology=self.topology,
            device=self.device,
            inject=self.inject,
            workload=self.workload,
            output_dir=self.output_dir,
            timeout_s=self.timeout_s,
            extra_args=self.extra_args,
            server=self.server,
            scenario=scenario,
            fault_file=self.fault_file,
        )
