"""``kvdoctor drift``'s one result, typed: kvdoctor's frozen rules against the installed SGLang, per matrix cell.

Pure data (no torch, no SGLang): built by ``kvdoctor.engines.sglang.drift.run_drift``, read by the CLI's
table, JUnit and step summary, and serialized by ``kvdoctor.report.serialize.jsonable`` for ``--json``
(``kvdoctor/schemas/drift.json``): a field is never renamed or removed, only added.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.core.sglang.inspect_result import FieldDrift

__all__ = ["CaseResult", "DriftReport"]


@dataclass
class CaseResult:
    """One fixture under one launch line: the fields compared and where they differ.

    Its fields are the keys of one ``results`` row of ``drift --json`` (``kvdoctor/schemas/drift.json``),
    serialized by ``kvdoctor.report.serialize.jsonable``; the table and JUnit read the same attributes.
    """

    model: str
    case: str
    argv: tuple[str, ...]
    fields: int
    ok: bool = field(init=False)
    drift: list[FieldDrift] = field(default_factory=list)
    kvdoctor_refusal: str | None = None
    sglang_refusal: str | None = None
    seconds: float = 0.0

    def __post_init__(self) -> None:
        self.seconds = round(self.seconds, 3)
        self.ok = not self.drift


@dataclass
class DriftReport:
    """The whole matrix: every case, and the totals a CI gate reads.

    ``engine`` is the installed SGLang compared against; in ``--json`` the shared header's ``engine``
    (the same name, version and path) stands for it. The other fields are the report's own keys.
    """

    ok: bool = field(init=False)
    engine: EngineRef
    cases: int = field(init=False)  # how many matrix cells ran
    fields_compared: int = field(init=False)
    drifting_cases: int = field(init=False)
    results: list[CaseResult]
    elapsed_s: float
    gpu_arch: str = "sm100"  # the --gpu-arch both sides were told

    def __post_init__(self) -> None:
        self.elapsed_s = round(self.elapsed_s, 3)
        self.ok = all(c.ok for c in self.results)
        self.cases = len(self.results)
        self.fields_compared = sum(c.fields for c in self.results)
        self.drifting_cases = sum(not c.ok for c in self.results)

    @property
    def drifting(self) -> list[CaseResult]:
        return [c for c in self.results if not c.ok]
