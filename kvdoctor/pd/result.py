"""What one PD eval produced: per-question records, the score, the gates, and the run's outcome.

Plain dataclasses: every serializer (JSON, JUnit, step summary, tables) is fed the same
:class:`PdEvalResult` and none of them re-derives a number. Its JSON body is the typed
:class:`PdEvalReport` (``PdEvalResult.report()``), serialized by ``kvdoctor.report.serialize.jsonable``
behind the shared header (``kvdoctor.report.envelope``); the per-question records go to CSV/Parquet.

With ``--oracle tokens`` the same result carries consistency's (``tokens``: a
:class:`~kvdoctor.consistency.result.ConsistencyResult`) and its body is :class:`TokensReport`: pd-eval's keys
(the GSM8K ones null) and then, added, ``oracle`` and ``tokens``. A GSM8K run's JSON is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any

from kvdoctor._exceptions import EXIT_DEPLOYMENT
from kvdoctor.consistency.result import ConsistencyResult
from kvdoctor.deploy.client import Completion
from kvdoctor.pd.gate import SKIPPED, GateResult
from kvdoctor.pd.gsm8k import CONVENTION, Question, parse_number


@dataclass(frozen=True)
class QuestionRecord:
    line: int
    question: str
    gold: str
    prediction: str | None
    correct: bool
    invalid: bool
    response: str
    completion_tokens: int | None
    latency_s: float
    finish_reason: str | None
    error: str | None


@dataclass(frozen=True)
class Score:
    accuracy: float
    invalid_rate: float
    num_questions: int
    completion_tokens: int
    latency_s: float

    @property
    def output_throughput(self) -> float:
        return self.completion_tokens / self.latency_s if self.latency_s > 0 else 0.0


def _plain(value: Decimal) -> str:
    return format(value.normalize(), "f") if value == value.to_integral() else str(value)


def record(question: Question, done: Completion) -> QuestionRecord:
    """Score one reply: correct when its last number equals the gold value numerically."""
    predicted = parse_number(done.text)
    return QuestionRecord(
        line=question.example.line,
        question=question.example.question,
        gold=_plain(question.gold),
        prediction=None if predicted is None else _plain(predicted),
        correct=predicted is not None and predicted == question.gold,
        invalid=predicted is None,
        response=done.text,
        completion_tokens=done.completion_tokens,
        latency_s=done.latency_s,
        finish_reason=done.finish_reason,
        error=done.error,
    )


def score(records: Sequence[QuestionRecord], latency_s: float) -> Score:
    n = len(records)
    return Score(
        accuracy=sum(r.correct for r in records) / n if n else 0.0,
        invalid_rate=sum(r.invalid for r in records) / n if n else 0.0,
        num_questions=n,
        completion_tokens=sum(r.completion_tokens or 0 for r in records),
        latency_s=latency_s,
    )


@dataclass(frozen=True)
class PdEvalReport:
    """The body of pd-eval's ``--json`` and ``result.json``: its keys, in order, are the published contract
    (``kvdoctor/schemas/pd-eval.json``). Existing keys never change name or meaning; new ones are added."""

    passed: bool
    exit_code: int
    exit_reason: str
    message: str
    model: str
    preset: str
    accuracy: float | None
    invalid_rate: float | None
    threshold: float | None  # None only with --oracle tokens (no accuracy floor)
    retractions: int | None
    retraction_source: str
    retraction_backup: str | None
    num_questions: int
    num_shots: int | None  # None only with --oracle tokens
    data_sha256: str | None
    data_source: str | None
    convention: str | None  # GSM8K's answer convention; None only with --oracle tokens
    api: str
    latency_s: float | None
    output_throughput: float | None
    completion_tokens: int | None
    gates: list[GateResult]
    prediction: dict[str, Any] | None
    launch_plan: dict[str, Any]
    server_versions: dict[str, str]
    run_dir: str
    logs: dict[str, str]
    wall_s: float
    dry_run: bool = False


@dataclass(frozen=True)
class TokensReport(PdEvalReport):
    """``--oracle tokens``: pd-eval's keys, then which oracle judged and consistency's report body (its keys
    as ``kvdoctor schema consistency`` publishes them: noise floor, every request's diff, state trace, ...)."""

    oracle: str = "tokens"
    tokens: ConsistencyResult | None = None


@dataclass(frozen=True)
class DryRunReport:
    """The body of ``pd-eval --dry-run --json``: what would start, and the retraction forecast."""

    dry_run: bool
    launch_plan: dict[str, Any]
    prediction: dict[str, Any] | None


@dataclass(frozen=True)
class TokensDryRunReport(DryRunReport):
    """``--oracle tokens --dry-run --json``: both deployments in ``launch_plan`` (one shared prefill, a decode and
    a router each), then the oracle, consistency's deployment (its pools and URLs), the CPU enablers and the
    workload."""

    oracle: str = "tokens"
    deployment: dict[str, Any] | None = None
    enablers: list[dict[str, str]] = field(default_factory=list)
    workload: dict[str, int] = field(default_factory=dict)


@dataclass
class PdEvalResult:
    """The outcome of one run; ``exit_code`` is what the CLI returns."""

    model: str
    preset: str
    threshold: float | None
    num_shots: int | None
    num_questions: int
    data_sha256: str | None
    data_source: str | None
    passed: bool = False
    exit_code: int = EXIT_DEPLOYMENT
    exit_reason: str = "not_run"
    message: str = ""
    score: Score | None = None
    retractions: int | None = None
    retraction_source: str = "none"
    retraction_backup: str | None = None
    gates: list[GateResult] = field(default_factory=list)
    plan: dict[str, object] = field(default_factory=dict)
    prediction: dict[str, object] | None = None
    server_versions: dict[str, str] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)
    run_dir: str = ""  # this run's own directory under --output-dir (kvdoctor.deploy.rundir)
    records: list[QuestionRecord] = field(default_factory=list)
    convention: str | None = CONVENTION
    api: str = "completions"
    wall_s: float = 0.0
    oracle: str = "gsm8k"
    tokens: ConsistencyResult | None = None  # --oracle tokens: consistency's result, which decided the gates

    def report(self) -> PdEvalReport:
        """Everything but the per-question records (those go to CSV/Parquet), the score flattened."""
        s = self.score
        extra: dict[str, Any] = {}
        kind: type[PdEvalReport] = PdEvalReport
        if self.oracle == "tokens":
            kind, extra = TokensReport, {"oracle": self.oracle, "tokens": self.tokens}
        return kind(
            passed=self.passed,
            exit_code=self.exit_code,
            exit_reason=self.exit_reason,
            message=self.message,
            model=self.model,
            preset=self.preset,
            accuracy=s.accuracy if s else None,
            invalid_rate=s.invalid_rate if s else None,
            threshold=self.threshold,
            retractions=self.retractions,
            retraction_source=self.retraction_source,
            retraction_backup=self.retraction_backup,
            num_questions=s.num_questions if s else self.num_questions,
            num_shots=self.num_shots,
            data_sha256=self.data_sha256,
            data_source=self.data_source,
            convention=self.convention,
            api=self.api,
            latency_s=s.latency_s if s else None,
            output_throughput=s.output_throughput if s else None,
            completion_tokens=s.completion_tokens if s else None,
            gates=list(self.gates),
            prediction=self.prediction,
            launch_plan=self.plan,
            server_versions=dict(self.server_versions),
            run_dir=self.run_dir,
            logs=dict(self.logs),
            wall_s=self.wall_s,
            **extra,
        )

    @property
    def engine_version(self) -> str | None:
        """The SGLang version the deployed servers report (``/server_info``); None when none answered.

        Two roles on different versions are both named (``0.5.23, 0.5.24``): the report must not pick one.
        """
        versions = sorted(set(self.server_versions.values()))
        return ", ".join(versions) if versions else None

    @property
    def warnings(self) -> list[str]:
        """Gates reported but not enforced (``--allow-no-retraction``): a pass with warnings, not a clean pass;
        with ``--oracle tokens`` also consistency's warnings (an incomplete state trace)."""
        tokens = list(self.tokens.warnings) if self.tokens is not None else []
        return [g.message for g in self.gates if g.status == SKIPPED] + tokens

    def record_dicts(self) -> list[dict[str, object]]:
        return [asdict(r) for r in self.records]
