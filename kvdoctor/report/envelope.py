"""The head of every ``--json`` report: which kvdoctor, which rules, which engine, when, how, and the verdict.

Every command's JSON object opens with the same keys (a :class:`RunHeader`), then carries its own
result's keys. The header keys mean the same thing in every command; the published JSON Schemas
(``kvdoctor schema inspect|roundtrip|pd-eval|drift``, files in ``kvdoctor/schemas/``) hold them
to it, and ``SCHEMA_VERSION`` names the contract:

- the major number changes only when a key is removed or changes meaning (never so far);
- the minor number changes when keys are added. Readers should ignore keys they do not know.

``verdict`` and ``exit_code`` always agree (:meth:`Verdict.of`): ``pass`` and ``warn`` exit 0,
``fail`` exits 1 (a check ran to the end and is red), ``error`` exits 2, 3 or 4 (no verdict could
be reached: bad input, a deployment that failed, or a kvdoctor bug).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field
from datetime import datetime, timezone
from enum import Enum
from typing import Any

from kvdoctor import __version__
from kvdoctor._exceptions import EXIT_GATE, EXIT_PASS
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.core.record import record
from kvdoctor.text import printable

SCHEMA_VERSION = "1.0"

__all__ = ["SCHEMA_VERSION", "RunHeader", "Verdict", "document", "header", "record_argv", "verdict_line"]


class Verdict(str, Enum):
    """One word for the outcome, the same in every command, always agreeing with ``exit_code``."""

    PASS = "pass"  # exit 0: checked, nothing found
    WARN = "warn"  # exit 0: checked, findings reported but not gated (e.g. inspect without --strict)
    FAIL = "fail"  # exit 1: a check ran to the end and is red
    ERROR = "error"  # exit 2, 3 or 4: no verdict (bad input, deployment failed, kvdoctor bug)

    @classmethod
    def of(cls, exit_code: int, *, warnings: int = 0) -> Verdict:
        """The verdict an exit code (and a count of ungated findings, for exit 0) stands for."""
        if exit_code == EXIT_PASS:
            return cls.WARN if warnings else cls.PASS
        return cls.FAIL if exit_code == EXIT_GATE else cls.ERROR

    @property
    def word(self) -> str:
        """How the one verdict line at the end of a command's output says it."""
        return {"pass": "passed", "warn": "passed with warnings", "fail": "FAILED", "error": "ERROR"}[self.value]


def verdict_line(verdict: Verdict, detail: str) -> str:
    """The plain text of the line every command's human output ends with: ``verdict: <word> — <detail>``."""
    return f"verdict: {verdict.word}" + (f" — {printable(detail)}" if detail else "")


_ARGV: list[str] | None = None


def record_argv(argv: Sequence[str] | None) -> None:
    """Remember the arguments the console entry point received (``kvdoctor.cli.app.main``); None forgets.

    The entry point forgets them when its command returns, so a later in-process invocation (a test
    driving the Typer app) never reports a previous run's command line as its own.
    """
    global _ARGV
    _ARGV = None if argv is None else [str(a) for a in argv]


def command_line(fallback: Sequence[str] = ()) -> list[str]:
    """The exact command line: ``kvdoctor`` and the arguments the entry point received.

    In-process callers that bypass the entry point (tests driving the Typer app) get FALLBACK, the
    command path click knows, so the key is never a guess dressed as the truth.
    """
    args = _ARGV if _ARGV is not None else list(fallback)
    return ["kvdoctor", *args]


def _kvdoctor_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kvdoctor")
    except PackageNotFoundError:
        return __version__


@record(frozen=True)
class RunHeader:
    """The keys every ``--json`` report opens with (see the module docstring for their contract)."""

    schema_version: str
    command: str
    kvdoctor_version: str
    rules_revision: str | None
    engine: EngineRef  # who answered: kvdoctor (its own rule model and pools), sglang or vllm (their own code)
    timestamp: str
    command_line: list[str]
    verdict: Verdict
    exit_code: int
    warnings: list[str] = field(default_factory=list)


def header(
    command: str,
    *,
    exit_code: int,
    warnings: Sequence[str] = (),
    engine: EngineRef | None = None,
    rules_revision: str | None = None,
    argv_fallback: Sequence[str] = (),
    now: datetime | None = None,
) -> RunHeader:
    """The header for COMMAND's report. ENGINE defaults to kvdoctor's own model at this version."""
    version = _kvdoctor_version()
    when = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return RunHeader(
        schema_version=SCHEMA_VERSION,
        command=command,
        kvdoctor_version=version,
        rules_revision=rules_revision,
        engine=engine or EngineRef("kvdoctor", version),
        timestamp=when.isoformat(timespec="seconds").replace("+00:00", "Z"),
        command_line=command_line(argv_fallback),
        verdict=Verdict.of(exit_code, warnings=len(warnings)),
        exit_code=exit_code,
        warnings=list(warnings),
    )


def document(head: RunHeader, body: Any) -> dict[str, Any]:
    """One JSON-ready object: the header's keys first, then BODY's (a dataclass or a mapping).

    A body key the header also defines (``engine``, ``exit_code``, ``rules_revision``) takes the
    header's value: the header is the one place those facts are decided.
    """
    from kvdoctor.report.serialize import jsonable  # the JSON writer, for the runs that print or write JSON

    top = jsonable(head)
    rest = jsonable(body)
    if not isinstance(rest, Mapping):
        raise TypeError(f"a report body must serialize to an object, not {type(rest).__name__}")
    return {**top, **{k: v for k, v in rest.items() if k not in top}}
