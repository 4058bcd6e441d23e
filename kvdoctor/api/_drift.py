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
from kvdoctor.api._arguments import checked
from kvdoctor.api._job import ErrorCase, Job, chosen, execute, names
from kvdoctor.api._servers import DriftSide, Progress, room, server_of
from kvdoctor.core.servers import DEFAULT_SERVER, facts
from kvdoctor.engines import GpuArch, Server

if TYPE_CHECKING:
    from kvdoctor.core.drift_result import DriftReport
    from kvdoctor.report.drift_report import Report


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


class DriftJob(Job["DriftReport", "Report"]):
    """One ``drift``: the rules against the installed server (its room's ``DriftSide``), cell by cell."""

    def __init__(
        self,
        fixtures: tuple[str, ...],
        cases: tuple[str, ...],
        gpu_arch: GpuArch,
        *,
        junit_path: Path | None = None,
        server: Server = DEFAULT_SERVER,
        explicit_arch: bool = False,
        architectures: Architectures | None = None,
    ) -> None:
        self.fixtures, self.cases, self.gpu_arch = fixtures, cases, gpu_arch
        self.junit_path = junit_path
        self.server, self.explicit_arch = server, explicit_arch
        self.architectures = architectures or Architectures()

    def check(self) -> None:
        told = facts(self.server)
        if self.explicit_arch and not told.platform:  # silently ignored, the user would think it was used
            raise InputError(
                f"--gpu-arch is the platform SGLang is told; drift --server {told.name} compares answers that take none"
            )
        self.architectures.check(self.fixtures, self.server)

    def error_case(self) -> ErrorCase:
        from kvdoctor.report.drift_report import SUITE, TITLE

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


@checked
def drift(
    *,
    fixture: str | Sequence[str] | None = None,
    case: str | Sequence[str] | None = None,
    gpu_arch: GpuArch | str = GpuArch.SM100,
    junit_path: Path | None = None,
    server: Server | str = DEFAULT_SERVER,
    all_architectures: bool = False,
    model_type: str | Sequence[str] | None = None,
    output_dir: Path | None = None,
    strict: bool = False,
) -> Report:
    """``kvdoctor drift [options]``: kvdoctor's frozen rules against the installed server (SGLang, or vLLM with
    ``server="vllm"``) on every bundled fixture x launch case (or, ``all_architectures``, a config for every model
    type the server's registry serves). Needs the server importable. Returns the report (``passed`` False when a
    cell drifts; ``report`` is the typed :class:`~kvdoctor.core.drift_result.DriftReport`)."""
    arch = chosen(GpuArch, gpu_arch, "gpu_arch")
    job = DriftJob(
        names(fixture),
        names(case),
        arch,
        junit_path=junit_path,
        server=server_of(server),  # type: ignore[arg-type]
        explicit_arch=arch is not GpuArch.SM100,
        architectures=Architectures(all_architectures, names(model_type), output_dir, strict),
    )
    return execute(job)
