"""``kvdoctor bench startup``: what a command costs before it answers, as process CPU time.

Each case is a fresh child of the same interpreter, charged its own CPU time (user + system, from
``os.wait4``: ``kvdoctor.bench.timing.time_process``). The cases run interleaved, round after round,
so a machine that slows down mid-run slows every case alike; each case reports its median, and its
ratio to the floor: ``python -c "import typer, rich.console, rich.table"``, what any CLI built on
typer and rich pays before its first line of code. Issue 17 holds ``inspect`` to 1.5x that floor, and issue 29
every ``inspect`` case beside it (SGLang and ``--server vllm``, tables and ``--json``: :meth:`over_target`).

Before the timed rounds every case runs once more under ``-X importtime`` (which doubles as its
warm-up: byte code compiled, files in the page cache): the modules that process loaded, so
"an SGLang question imports nothing of vLLM" is measured, not assumed, and the slowest imports say
where the rest of the time goes. Every child must exit 0: a case that failed measured its error
path, not its start-up, and the bench stops there (``InternalError``).
"""

from __future__ import annotations

import os
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from kvdoctor._exceptions import InternalError
from kvdoctor.bench.timing import ProcessRun, time_process
from kvdoctor.text import shown

FLOOR = "floor"
TARGET = 1.5  # issue 17: inspect's start-up at most this many times the floor

# A bare Typer app running one command with a str argument and an int option: what Typer's own option
# parsing costs on top of the floor (typer 0.29 checks every option value through pydantic, which alone
# costs more than the floor's margin: constraints/ pin 0.28.0, which parses with its vendored click types).
_TYPER_COMMAND = """\
import typer
app = typer.Typer()
@app.command()
def main(model: str, tokens: int = typer.Option(1, min=1)) -> None:
    print(model, tokens)
app(["x", "--tokens", "2"], standalone_mode=False)
"""


@dataclass(frozen=True)
class Case:
    """One command to time: a short name, what it stands for, and its words after the interpreter."""

    name: str
    about: str
    args: tuple[str, ...]
    sglang_question: bool = False  # must load nothing of vLLM


CASES = (
    Case(FLOOR, "python -c 'import typer, rich.console, rich.table'", ("-c", "import typer, rich.console, rich.table")),
    Case("typer-command", "a bare Typer app running one command (str argument, int option)", ("-c", _TYPER_COMMAND)),
    Case("inspect", "kvdoctor inspect inkling-small", ("-m", "kvdoctor", "inspect", "inkling-small"), True),
    Case(
        "inspect-json",
        "kvdoctor inspect inkling-small --json",
        ("-m", "kvdoctor", "inspect", "inkling-small", "--json"),
        True,
    ),
    Case(
        "inspect-vllm",
        "kvdoctor inspect llama-3.1-8b --server vllm",
        ("-m", "kvdoctor", "inspect", "llama-3.1-8b", "--server", "vllm"),
    ),
    Case(
        "inspect-vllm-json",
        "kvdoctor inspect llama-3.1-8b --server vllm --json",
        ("-m", "kvdoctor", "inspect", "llama-3.1-8b", "--server", "vllm", "--json"),
    ),
    Case("help", "kvdoctor --help", ("-m", "kvdoctor", "--help")),
)

# Module families worth naming when a start-up loads them (a prefix matches the module and its children).
VLLM = ("vllm", "kvdoctor.core.vllm", "kvdoctor.engines.vllm", "kvdoctor.cli.render.vllm")
SGLANG = ("sglang", "kvdoctor.core.sglang", "kvdoctor.engines.sglang")
HEAVY = (
    "torch",
    "triton",
    "numpy",
    "pandas",
    "pyarrow",
    "transformers",
    "httpx",
    "psutil",
    "pydantic",
    "kvdoctor.pd",
    "kvdoctor.consistency",
    "kvdoctor.roundtrip",
    # The report writers: a run loads each only when its report is asked for (--junit, --json, a step summary).
    "kvdoctor.report.junit",
    "kvdoctor.report.serialize",
    "kvdoctor.report.target",
)
SLOWEST = 8  # imports listed per case, by their own time

# Children must not write into this run's GitHub step summary, complete a shell word, or profile imports
# (the timed rounds) because this process was asked to; nor be kept from caching byte code: under
# PYTHONDONTWRITEBYTECODE the warm-up caches nothing, and every round of a case whose sources changed since
# their .pyc was written (an edited tree) pays their compilation, measuring the compiler, not the start-up.
_CHILD_DROPS = (
    "GITHUB_STEP_SUMMARY",
    "_KVDOCTOR_COMPLETE",
    "PYTHONPROFILEIMPORTTIME",
    "KVDOCTOR_DEBUG",
    "PYTHONDONTWRITEBYTECODE",
)
_IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|\s*(\S+)\s*$")


@dataclass(frozen=True)
class Imported:
    """One module a case's process imported: its own time and with what it imported (milliseconds)."""

    module: str
    self_ms: float
    cumulative_ms: float


@dataclass(frozen=True)
class CaseResult:
    """One case: its CPU seconds per round (median, fastest, every sample), wall median, ratio to the floor,
    and what its process loaded."""

    name: str
    command: str
    cpu_median_s: float
    cpu_min_s: float
    wall_median_s: float
    vs_floor: float
    cpu_samples_s: list[float]
    modules: int
    vllm_modules: list[str]
    sglang_modules: list[str]
    heavy_modules: list[str]
    slowest_imports: list[Imported] = field(default_factory=list)


@dataclass(frozen=True)
class StartupResult:
    rounds: int
    python: str
    target: float
    cases: list[CaseResult]

    def case(self, name: str) -> CaseResult:
        return next(c for c in self.cases if c.name == name)

    def over_target(self) -> list[CaseResult]:
        """The inspect cases whose ratio to the floor is above the target, or unknown: a floor of 0 CPU seconds
        makes every ratio NaN, and ``nan > target`` is False, which would read as "within the target"."""
        return [c for c in self.cases if c.name.startswith("inspect") and not c.vs_floor <= self.target]

    def vllm_leaks(self) -> list[CaseResult]:
        """The SGLang questions that loaded something of vLLM."""
        sglang = {c.name for c in CASES if c.sglang_question}
        return [c for c in self.cases if c.name in sglang and c.vllm_modules]

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def child_env() -> dict[str, str]:
    """This process's environment, less what would make a child do more (or other) than start up."""
    return {k: v for k, v in os.environ.items() if k not in _CHILD_DROPS and not k.startswith("_TYPER_COMPLETE")}


def imported(stderr: str) -> list[Imported]:
    """The modules ``-X importtime`` reported on STDERR, in import order."""
    rows = []
    for line in stderr.splitlines():
        match = _IMPORT_LINE.match(line)
        if match:
            own, cumulative, module = match.groups()
            rows.append(Imported(module, int(own) / 1e3, int(cumulative) / 1e3))
    return rows


def family(modules: Sequence[str], prefixes: Sequence[str]) -> list[str]:
    """MODULES that are one of PREFIXES or inside one, sorted."""
    return sorted({m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)})


def roots(modules: Sequence[str], prefixes: Sequence[str]) -> list[str]:
    """Which of PREFIXES MODULES touched, in PREFIXES' order."""
    return [p for p in prefixes if family(modules, (p,))]


def _checked(case: Case, run: ProcessRun) -> ProcessRun:
    if run.exit_code != 0:
        last = next((line for line in reversed(run.stderr.splitlines()) if line.strip()), "no output")
        raise InternalError(
            f"bench startup: {case.about} exited {run.exit_code}, so its start-up cannot be timed: {shown(last, 300)}"
        )
    return run


def run_startup_bench(
    rounds: int = 7,
    *,
    cases: Sequence[Case] = CASES,
    python: str = sys.executable,
    progress: Callable[[str, int, int], None] | None = None,
) -> StartupResult:
    """Every case once under ``-X importtime``, then ROUNDS interleaved timed rounds of all of them.

    PROGRESS, when given, hears (what starts now, children finished, children in all)."""
    env = child_env()
    total = len(cases) * (rounds + 1)
    done = 0

    def run(case: Case, *flags: str, what: str) -> ProcessRun:
        nonlocal done
        if progress:
            progress(f"{what}: {case.name}", done, total)
        result = _checked(case, time_process([python, *flags, *case.args], env=env))
        done += 1
        return result

    loaded = {case.name: imported(run(case, "-X", "importtime", what="imports").stderr) for case in cases}
    samples: dict[str, list[ProcessRun]] = {case.name: [] for case in cases}
    for r in range(rounds):
        for case in cases:
            samples[case.name].append(run(case, what=f"round {r + 1} of {rounds}"))
    medians = {name: statistics.median(run.cpu_s for run in runs) for name, runs in samples.items()}
    floor = medians.get(FLOOR) or next(iter(medians.values()))
    results = []
    for case in cases:
        runs = samples[case.name]
        modules = [row.module for row in loaded[case.name]]
        slowest = sorted(loaded[case.name], key=lambda row: row.self_ms, reverse=True)[:SLOWEST]
        results.append(
            CaseResult(
                name=case.name,
                command=case.about,
                cpu_median_s=medians[case.name],
                cpu_min_s=min(run.cpu_s for run in runs),
                wall_median_s=statistics.median(run.wall_s for run in runs),
                vs_floor=medians[case.name] / floor if floor > 0 else float("nan"),
                cpu_samples_s=[run.cpu_s for run in runs],
                modules=len(set(modules)),
                vllm_modules=family(modules, VLLM),
                sglang_modules=family(modules, SGLANG),
                heavy_modules=roots(modules, HEAVY),
                slowest_imports=slowest,
            )
        )
    return StartupResult(rounds=rounds, python=python, target=TARGET, cases=results)
