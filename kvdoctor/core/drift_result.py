"""``kvdoctor drift``'s one result, typed, for every server: kvdoctor's frozen rules against the installed
server's own code, per matrix cell (one fixture under one launch line).

Pure data (no torch, no server): built by ``kvdoctor.engines.<server>.drift``, read by the CLI's table,
JUnit and the step summary (``kvdoctor.report.drift_report``), and serialized by
``kvdoctor.report.serialize.jsonable`` for ``--json`` (``kvdoctor/schemas/drift.json``): a field is never
renamed or removed, only added.

What differs by server is only the name of the server's side, and it is a key of its own, as in
``inspect``'s JSON: a SGLang cell carries ``sglang_refusal`` and its drifts ``sglang``
(:class:`SglangCaseResult`, ``FieldDrift``); a vLLM cell ``vllm_refusal`` and ``vllm``
(:class:`VllmCaseResult`, :class:`VllmFieldDrift`). A reader tests which key is present; neither appears
as ``null`` beside the other. Everything else (the totals, ``ok``, the verdict) is this one type.

A cell is one of three (its ``status``): ``ok`` (every field compared agrees), ``drift`` (a field differs, or one
side refused), ``error`` (the server's own code failed in a way it does not refuse: ``error`` holds its type,
message and file:line, and no field of the cell was compared). An error is never drift: the report counts it
apart (``error_cases``), and a run with one is no pass (exit 3 unless a cell also drifts, exit 1).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import field
from typing import Any, ClassVar, Protocol

from kvdoctor.core import servers
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.core.record import record

__all__ = [
    "CELL_DRIFT",
    "CELL_ERROR",
    "CELL_OK",
    "ArchitectureTotals",
    "CaseResult",
    "Disagreement",
    "DriftReport",
    "GeneratedDriftReport",
    "ModelTypeVerdict",
    "SglangCaseResult",
    "VllmCaseResult",
    "VllmFieldDrift",
    "server_answer",
]


class Disagreement(Protocol):
    """One field where the sides disagree: its name, kvdoctor's answer, and the server's under its own name
    (``FieldDrift.sglang``, :attr:`VllmFieldDrift.vllm`)."""

    field: str
    kvdoctor: Any


CELL_OK, CELL_DRIFT, CELL_ERROR = "ok", "drift", "error"  # a cell's status


def server_answer(drift: Disagreement, server: str) -> Any:
    """The server's side of DRIFT (its attribute is the server's name)."""
    return getattr(drift, server)


@record(frozen=True)
class VllmFieldDrift:
    """One field where kvdoctor's vLLM rule model and the installed vLLM disagree (values as text, as
    ``inspect --server vllm --engine vllm`` compares them)."""

    field: str
    kvdoctor: Any
    vllm: Any


@record
class CaseResult:
    """One fixture under one launch line: the fields compared and where they differ (the shared part).

    A server's cell is its subclass (:class:`SglangCaseResult`, :class:`VllmCaseResult`), which adds the
    server's refusal under its own key and the cell's time; the positional order of the fields is the
    one ``drift`` always had (model, case, argv, fields, drift, kvdoctor_refusal, <server>_refusal, seconds),
    then ``error``: the server's own code failed in this cell (``RuntimeError: … at vllm/platforms/cpu.py:243``),
    so nothing was compared; the cell's ``status`` is then ``error``, neither ok nor drift.
    """

    server: ClassVar[str]

    model: str
    case: str
    argv: tuple[str, ...]
    fields: int
    ok: bool = field(init=False)
    status: str = field(init=False)  # ok | drift | error (CELL_*)
    drift: list[Any] = field(default_factory=list)
    kvdoctor_refusal: str | None = None

    def __post_init__(self) -> None:
        failed = getattr(self, "error", None) is not None  # a subclass's field, after the time
        self.status = CELL_ERROR if failed else CELL_DRIFT if self.drift else CELL_OK
        self.ok = self.status == CELL_OK
        self.seconds: float = round(getattr(self, "seconds", 0.0), 3)  # a subclass's field, after the refusal

    @property
    def server_refusal(self) -> str | None:
        """What the installed server refused, in its words (None: it did not refuse)."""
        return getattr(self, f"{self.server}_refusal")


@record
class SglangCaseResult(CaseResult):
    """A cell against the installed SGLang (``results`` row of ``drift --json``)."""

    server: ClassVar[str] = "sglang"

    sglang_refusal: str | None = None
    seconds: float = 0.0
    error: str | None = None  # SGLang's own code failed here: type, message, file:line (nothing compared)


@record
class VllmCaseResult(CaseResult):
    """A cell against the installed vLLM (``results`` row of ``drift --server vllm --json``)."""

    server: ClassVar[str] = "vllm"

    vllm_refusal: str | None = None
    seconds: float = 0.0
    error: str | None = None  # vLLM's own code failed here: type, message, file:line (nothing compared)


@record
class DriftReport:
    """The whole matrix: every case, and the totals a CI gate reads.

    ``engine`` is the installed server compared against; in ``--json`` the shared header's ``engine``
    (the same name, version and path) stands for it. The other fields are the report's own keys.
    ``gpu_arch`` is the GPU SGLang was told it runs on; None for vLLM, whose compared answers take no
    platform. ``error_cases`` counts the cells where the server's own code failed (not drift: nothing was
    compared there); ``drifting_cases`` only the cells where a compared field differs.
    """

    ok: bool = field(init=False)
    engine: EngineRef
    cases: int = field(init=False)  # how many matrix cells ran
    fields_compared: int = field(init=False)
    drifting_cases: int = field(init=False)
    error_cases: int = field(init=False)  # cells where the server's own code failed (no field compared)
    results: list[CaseResult]
    elapsed_s: float
    gpu_arch: str | None = "sm100"  # the --gpu-arch both sides were told (SGLang)

    def __post_init__(self) -> None:
        self.elapsed_s = round(self.elapsed_s, 3)
        self.ok = all(c.ok for c in self.results)
        self.cases = len(self.results)
        self.fields_compared = sum(c.fields for c in self.results)
        self.drifting_cases = sum(c.status == CELL_DRIFT for c in self.results)
        self.error_cases = sum(c.status == CELL_ERROR for c in self.results)

    @property
    def server(self) -> str:
        """Which server was compared against (``sglang``, ``vllm``): the installed package's name."""
        return self.engine.name

    @property
    def server_title(self) -> str:
        """How a sentence names the server's side (a table's column, a JUnit message): its facts' title."""
        try:
            return servers.facts(self.server).title
        except KeyError:  # a server kvdoctor has no facts for is named as its package
            return self.server

    @property
    def drifting(self) -> list[CaseResult]:
        """The cells where a compared field differs (never a cell whose server failed)."""
        return [c for c in self.results if c.status == CELL_DRIFT]

    @property
    def errored(self) -> list[CaseResult]:
        """The cells where the server's own code failed (nothing compared there)."""
        return [c for c in self.results if c.status == CELL_ERROR]

    def errors(self) -> list[tuple[str, int]]:
        """Each distinct failure of the server's code and how many cells it ended, the most common first
        (the first seen first among equals)."""
        return Counter(str(getattr(c, "error", "")) for c in self.errored).most_common()


@record
class ModelTypeVerdict:
    """One generated model type of ``drift --all-architectures``: its cells and how many drift."""

    model_type: str
    architecture: str
    has_fixture: bool  # a bundled fixture has this model type (the fixture gate covers it too)
    cells: int
    drifting_cells: int
    ok: bool = field(init=False)
    error_cells: int = 0  # cells where the server's own code failed (not drift)

    def __post_init__(self) -> None:
        self.ok = self.drifting_cells == 0 and self.error_cells == 0


@record
class ArchitectureTotals:
    """What ``drift --all-architectures`` made of SGLang's model registry, and how strictly it gates."""

    registry_architectures: int  # architectures SGLang's ModelRegistry serves (its modules that import)
    model_types: int  # candidate model types (SGLang's config registry + causal-LM types it serves)
    generated: int  # configs written and run
    skipped: int = field(init=False)
    skipped_by_reason: dict[str, int] = field(default_factory=dict)
    skipped_model_types: dict[str, str] = field(default_factory=dict)  # model type -> reason
    per_model_type: list[ModelTypeVerdict] = field(default_factory=list)
    output_dir: str | None = None  # where the configs were kept (None: a temporary directory, removed)
    strict: bool = False  # drift in the generated set gates (exit 1) instead of being reported (exit 0, warn)

    def __post_init__(self) -> None:
        self.skipped = len(self.skipped_model_types)


@record
class GeneratedDriftReport(DriftReport):
    """``drift --all-architectures``: the matrix over generated configs, with the registry's totals."""

    architectures: ArchitectureTotals | None = None
