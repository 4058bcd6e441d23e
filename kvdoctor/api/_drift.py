"""``drift``: kvdoctor's rules against the installed server over every fixture x a launch matrix.

Each server's side is its room's ``drift_side`` (``kvdoctor.api._servers``): the engine that is the installed server's
own code and the ``--all-architectures`` set its registry serves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kvdoctor._exceptions import InputError
from kvdoctor.api._job import ErrorCase, Job, chosen, execute, names
from kvdoctor.api._keywords import keyword_function
from kvdoctor.api._servers import DriftSide, Progress, room, server_of
from kvdoctor.core.declared import option
from kvdoctor.core.servers import DEFAULT_SERVER, facts
from kvdoctor.engines import GPU_ARCH_HELP, GpuArch, Server
from kvdoctor.report.drift_report import SUITE, TITLE, Report

if TYPE_CHECKING:
    from kvdoctor.core.drift_result import DriftReport


@dataclass(frozen=True)
class Architectures:
    """``--all-architectures`` and the options that only mean something with it."""

    on: bool = False
    model_types: tuple[str, ...] = ()
    output_dir: Path | None = None
    strict: bool = False

    def check(self, fixtures: tuple[str, ...], server: Server) -> None:
        if not self.on:
            given = [
                name
                for name, value in (
                    ("--model-type", self.model_types),
                    ("--output-dir", self.output_dir),
                    ("--strict", self.strict),
                )
                if value
            ]
            if given:
                raise InputError(f"{', '.join(given)} only mean(s) something with --all-architectures")
            return
        if fixtures:
            raise InputError("--all-architectures generates its own configs; it cannot be combined with --fixture")
        out = self.output_dir
        if out is not None and out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise InputError(f"--output-dir {out} exists and is not an empty directory (nothing is overwritten)")


@dataclass(frozen=True)
class DriftArgs:
    """A ``drift``'s options, each declared once here: ``kvdoctor drift``'s options and :func:`kvdoctor.api.drift`'s
    keyword arguments are made from these fields (``kvdoctor.core.declared``)."""

    fixture: str | Sequence[str] | None = option(None, "--fixture", help="Only this bundled fixture (repeatable).")
    case: str | Sequence[str] | None = option(None, "--case", help="Only this launch case (repeatable).")
    gpu_arch: GpuArch | str = option(GpuArch.SM100, "--gpu-arch", help=GPU_ARCH_HELP)
    junit_path: Path | None = option(None, "--junit", help="Write JUnit XML: one case per matrix cell.")
    server: Server | str = option(
        DEFAULT_SERVER,
        "--server",
        help="Whose rules and code: sglang (default) or vllm (kvdoctor's vLLM rules against the installed vLLM).",
    )
    all_architectures: bool = option(
        False,
        "--all-architectures",
        help="Instead of the fixtures: a config for every model type SGLang's registry serves, from its config "
        "class's defaults, under a 4-case matrix (docs/drift.md). Drift there is reported (exit 0) unless --strict.",
    )
    model_type: str | Sequence[str] | None = option(
        None, "--model-type", help="With --all-architectures: only this model type (repeatable)."
    )
    output_dir: Path | None = option(
        None, "--output-dir", help="With --all-architectures: keep the generated configs here (new or empty)."
    )
    strict: bool = option(
        False, "--strict", help="With --all-architectures: a drifting generated cell exits 1, as a fixture's does."
    )


class DriftJob(Job["DriftReport", "Report"]):
    """One ``drift``: the rules against the installed server (its room's ``DriftSide``), cell by cell."""

    def __init__(self, args: DriftArgs, *, explicit_arch: bool | None = None) -> None:
        """EXPLICIT_ARCH: ``--gpu-arch`` was given (None: it is not the default)."""
        self.fixtures, self.cases = names(args.fixture), names(args.case)
        self.gpu_arch = chosen(GpuArch, args.gpu_arch, "gpu_arch")
        self.junit_path = args.junit_path
        self.server = server_of(args.server)  # type: ignore[assignment]
        self.explicit_arch = self.gpu_arch is not GpuArch.SM100 if explicit_arch is None else explicit_arch
        self.architectures = Architectures(args.all_architectures, names(args.model_type), args.output_dir, args.strict)

    def check(self) -> None:
        told = facts(self.server)
        if self.explicit_arch and not told.platform:  # silently ignored, the user would think it was used
            raise InputError(
                f"--gpu-arch is the platform SGLang is told; drift --server {told.name} compares answers that take none"
            )
        self.architectures.check(self.fixtures, self.server)

    def error_case(self) -> ErrorCase:
        return ErrorCase(SUITE, TITLE, self.junit_path)

    def work(self) -> DriftReport:
        side = room(self.server).drift_side
        adapter = side.adapter()  # the installed server is the other side (exit 2 when it cannot drift)
        if self.architectures.on:
            return self._all_architectures(side, adapter.title)
        return self.watched(
            lambda update: adapter.drift(self.fixtures, self.cases, self.gpu_arch, update), f"import {adapter.title}"
        )

    def _all_architectures(self, side: DriftSide, title: str) -> DriftReport:
        chosen = self.architectures

        def run(update: Progress | None) -> DriftReport:
            return side.all_architectures(
                self.cases,
                self.gpu_arch,
                update,
                output_dir=chosen.output_dir,
                model_types=chosen.model_types,
                strict=chosen.strict,
            )

        return self.watched(run, f"import {title}")

    def report(self, result: DriftReport) -> Report:
        from kvdoctor.report.drift_report import Report

        return Report(result)


drift = keyword_function(
    DriftArgs,
    lambda args: execute(DriftJob(args)),
    name="drift",
    module=__name__,
    doc="""``kvdoctor drift [options]``: kvdoctor's frozen rules against the installed server (SGLang, or vLLM with
    ``server="vllm"``) on every bundled fixture x launch case (or, ``all_architectures``, a config for every model
    type the server's registry serves). Needs the server importable. Returns the report (``passed`` False when a
    cell drifts; ``report`` is the typed :class:`~kvdoctor.core.drift_result.DriftReport`).""",
)
