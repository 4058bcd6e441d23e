"""One ``PdEvalResult`` fed to every serializer: JSON, JUnit, step summary, per-question tables.

Pure functions of the result (no terminal, no rich): ``kvdoctor.pd.render`` draws the same rows on a
terminal and ``kvdoctor.pd.publish`` writes and prints them, so this module imports neither and the
pd modules form no import cycle (``tests/test_layering.py``).

Every output agrees with the exit code: JUnit holds a failure or an error exactly when the command
exits non-zero, the step summary's headline says FAILED exactly then, and the JSON's ``verdict`` is
``Verdict.of(exit_code)``. With ``--oracle tokens`` the rows and cases are consistency's gates (the same result
carries them, ``kvdoctor.pd.tokens``), and the engine is the SGLang installed beside kvdoctor, whose servers ran.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvdoctor._exceptions import EXIT_DEPLOYMENT, EXIT_GATE, EXIT_PASS, InputError
from kvdoctor.consistency.report import cases as consistency_cases
from kvdoctor.consistency.report import engine_ref as installed
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.core.sglang.rules import RULES_REVISION
from kvdoctor.pd.gate import FAILED, PASSED, SKIPPED
from kvdoctor.pd.result import DryRunReport, PdEvalReport, PdEvalResult, TokensDryRunReport
from kvdoctor.report import envelope, github, junit, reportable, rows, serialize
from kvdoctor.report.units import NONE, human, noun_for

COMMAND = "pd-eval"
SUITE = "kvdoctor pd-eval"
TITLE = "kvdoctor pd-eval"
CLASSNAME = "kvdoctor.pd_eval"
RESULT_FILE = "result.json"
TABLE_FILES = ("questions.csv", "questions.parquet")
OUTPUT_FILES = (RESULT_FILE, *TABLE_FILES)  # what a run writes into its run directory (beside logs)


def _fmt(value: float | None, spec: str = ".3f", unit: str = "") -> str:
    if value is None:
        return NONE
    return format(value, spec) + (f" {unit}" if unit else "")


def engine_ref(result: PdEvalResult) -> EngineRef:
    """The engine that answered: the SGLang servers the run deployed (or attached to), at the version
    they report; null when none answered (a deployment that never came up). With ``--oracle tokens``:
    the SGLang installed beside kvdoctor, as consistency names it (its servers ran in this environment)."""
    if result.tokens is not None:
        return installed()
    return EngineRef("sglang", result.engine_version, None)


def document(result: PdEvalResult, *, exit_code: int | None = None) -> dict[str, Any]:
    """The JSON of ``--json`` and ``result.json``: the shared header, then :class:`PdEvalReport`'s keys.

    EXIT_CODE overrides the run's own when the command ends differently (a report that could not be
    written exits 2), so ``verdict`` and ``exit_code`` say what the process really returned.
    """
    return reportable.json_document(Report(result, exit_code))


def _dry_run_header() -> envelope.RunHeader:
    """A dry run's header: exit 0 (the plan was built, nothing started), SGLang's engine not asked."""
    return envelope.header(
        COMMAND,
        exit_code=EXIT_PASS,
        engine=EngineRef("sglang", None, None),
        rules_revision=RULES_REVISION,
        argv_fallback=(COMMAND,),
    )


def dry_run_document(launch_plan: dict[str, Any], prediction: dict[str, Any] | None) -> dict[str, Any]:
    """``--dry-run --json``: the header (exit 0: the plan was built, nothing started) and the plan."""
    return envelope.document(
        _dry_run_header(), DryRunReport(dry_run=True, launch_plan=launch_plan, prediction=prediction)
    )


def tokens_dry_run_document(
    launch_plan: dict[str, Any], deployment: dict[str, Any], enablers: list[dict[str, str]], workload: dict[str, int]
) -> dict[str, Any]:
    """``--oracle tokens --dry-run --json``: the same header, both deployments, the enablers and the workload."""
    body = TokensDryRunReport(
        dry_run=True,
        launch_plan=launch_plan,
        prediction=None,
        deployment=deployment,
        enablers=enablers,
        workload=workload,
    )
    return envelope.document(_dry_run_header(), body)


def _deployed(result: PdEvalResult) -> bool:
    """The deployment held for the whole run: gates ran and the exit code is theirs (0 or 1).

    A run whose gates passed but whose processes survived teardown exits 3: its deployment case is an
    error, or JUnit would show green beside a red exit code.
    """
    ran = bool(result.gates) if result.tokens is not None else result.score is not None
    return ran and result.exit_code in (EXIT_PASS, EXIT_GATE)


def junit_cases(result: PdEvalResult) -> list[junit.Case]:
    """deployment, accuracy, retraction: a gate that never ran is an error, not a pass."""
    deployed = _deployed(result)
    cases = [
        junit.Case(
            "deployment",
            junit.PASSED if deployed else junit.ERROR,
            "" if deployed else f"{result.exit_reason}: {result.message}",
            details="" if deployed else result.message,
            time_s=result.wall_s,
        )
    ]
    if result.tokens is not None:
        not_run = f"not run ({result.exit_reason})"
        return cases + (consistency_cases(result.tokens) if deployed else [junit.Case("tokens", junit.ERROR, not_run)])
    if result.score is None:
        not_run = f"not run ({result.exit_reason})"
        cases += [junit.Case(name, junit.ERROR, not_run) for name in ("accuracy", "retraction")]
        return cases
    cases += [
        junit.Case(g.name, g.status, g.message if g.status != junit.PASSED else "", details=g.message)
        for g in result.gates
    ]
    return cases


def summary_rows(result: PdEvalResult) -> list[github.Row]:
    """The table a person reads (terminal and step summary): values with units, ``–`` for none."""
    if result.tokens is not None:
        return _tokens_rows(result)
    gates = {g.name: g.status for g in result.gates}
    s = result.score
    na = "error" if s is None else "passed"
    deployed = _deployed(result)
    return [
        github.Row(
            "deployment",
            "ok" if deployed else result.exit_reason,
            "",
            PASSED if deployed else "error",
        ),
        github.Row(
            "accuracy", _fmt(s.accuracy if s else None), f"≥ {result.threshold:.3f}", gates.get("accuracy", "error")
        ),
        github.Row(
            "retractions on decode",
            NONE if result.retractions is None else f"{human(result.retractions)} ({result.retraction_source})",
            "> 0",
            gates.get("retraction", "error"),
        ),
        github.Row("invalid rate", _fmt(s.invalid_rate if s else None), "", na),
        github.Row("questions / shots", f"{human(result.num_questions)} / {human(result.num_shots)}", "", na),
        github.Row("latency", _fmt(s.latency_s if s else None, ".1f", "s"), "", na),
        github.Row("output throughput", _fmt(s.output_throughput if s else None, ",.1f", "token/s"), "", na),
    ]


def _tokens_rows(result: PdEvalResult) -> list[github.Row]:
    """--oracle tokens: the deployment, then consistency's gates as they ran (their messages are the values)."""
    deployed = _deployed(result)
    head = github.Row("deployment", "ok" if deployed else result.exit_reason, "", PASSED if deployed else "error")
    if not deployed:
        return [head, github.Row("tokens", NONE, "identical", "error")]
    return [head, *(github.Row(g.name, g.message, "", g.status) for g in result.gates)]


def status_line(result: PdEvalResult, *, markdown: bool = False) -> str:
    """The verdict word, the model and preset, the message; with MARKDOWN (the step summary's head) each outside
    value escaped to render as its text (a model named ``<img …>`` or holding ``|`` or a backtick)."""
    verdict = envelope.Verdict.of(result.exit_code, warnings=len(result.warnings))  # warnings count at exit 0 only
    word = f"**{verdict.word}**" if result.exit_code == EXIT_PASS else f"**{verdict.word}** ({result.exit_reason})"
    if markdown:
        model, preset, message = (github.text(v) for v in (result.model, result.preset, result.message))
        return f"{word} — {model} ({preset}); {message}"
    return f"{word} — `{result.model}` ({result.preset}); {result.message}"


def verdict_detail(result: PdEvalResult, exit_code: int | None = None) -> str:
    """What the one verdict line says after the word: the numbers on a pass, what went wrong otherwise."""
    code = result.exit_code if exit_code is None else exit_code
    s = result.score
    if code == EXIT_PASS and result.tokens is not None:
        return result.tokens.summary_line()  # "16/16 requests identical, 7 retractions (301 s)"
    if code == EXIT_PASS and s is not None:
        # Short enough to stay one line at 80 columns: the numbers a person checks first.
        n, asked = result.retractions, s.num_questions
        retracted = f"{human(n)} {noun_for(n, 'retraction')}" if n else "retraction guard skipped"
        asked_line = f"{human(asked)} {noun_for(asked, 'question')}"
        return f"accuracy {s.accuracy:.3f} ≥ {result.threshold:.3f}, {retracted}, {asked_line}"
    if code == EXIT_GATE:
        return "; ".join(g.message for g in result.gates if g.status == FAILED) or result.message
    if code == result.exit_code:
        # The message's first clause ("prefill exited with code 7"); the rest (a log tail) is printed
        # whole above the verdict and kept in result.json, never cut with "…".
        first = result.message.split("; ", 1)[0]
        return f"{result.exit_reason}: {first}" if first else result.exit_reason
    return "a report could not be written (see the error above)"


def summary_details(result: PdEvalResult) -> dict[str, str]:
    """Under the step summary's table: the failure (a deployment's log tail) and the launch plan."""
    details = {}
    if result.exit_code >= EXIT_DEPLOYMENT and result.message:
        details["failure"] = result.message
    details["launch plan"] = "\n".join(
        " ".join(step["argv"]) or f"(external) {step['url']}"  # type: ignore[index]
        for step in result.plan.get("steps", [])  # type: ignore[union-attr]
    )
    return details


def step_summary(result: PdEvalResult) -> str:
    return reportable.step_summary(Report(result))


@dataclass(frozen=True, repr=False)  # repr: the protocol's one line (what a failed assert shows)
class Report(reportable.Reportable):
    """One pd-eval run as every reporter reads it (``kvdoctor.report.reportable``).

    OVERRIDE replaces the run's exit code when the command ends differently: a report that could not be
    written exits 2, and the JSON then says so (verdict error) while the run's own gates stay as they ran.
    """

    result: PdEvalResult
    override: int | None = None
    command = COMMAND
    suite = SUITE
    title = TITLE
    classname = CLASSNAME
    rules_revision = RULES_REVISION

    @property
    def exit_code(self) -> int:
        return self.result.exit_code if self.override is None else self.override

    @property
    def warnings(self) -> Sequence[str]:
        return self.result.warnings if self.exit_code == EXIT_PASS else ()

    @property
    def engine(self) -> EngineRef:
        return engine_ref(self.result)

    def body(self) -> PdEvalReport:
        return self.result.report()

    def detail(self) -> str:
        return verdict_detail(self.result, self.exit_code)

    def junit_cases(self) -> list[junit.Case]:
        return junit_cases(self.result)

    def summary_rows(self) -> list[github.Row]:
        return summary_rows(self.result)

    def summary_head(self) -> str:
        return status_line(self.result, markdown=True)

    def summary_details(self) -> dict[str, str]:
        return summary_details(self.result)


def annotations(result: PdEvalResult) -> list[str]:
    if result.exit_code == EXIT_PASS:
        level = "warning" if any(g.status == SKIPPED for g in result.gates) else "notice"
        return [github.annotation(level, status_line(result), title="pd-eval passed")]
    failed = [g for g in result.gates if g.status == FAILED]
    if not failed:
        return [github.annotation("error", result.message, title=f"pd-eval {result.exit_reason}")]
    return [github.annotation("error", g.message, title=f"pd-eval {g.reason}") for g in failed]


def write_all(
    result: PdEvalResult,
    run_dir: Path,
    *,
    junit_path: Path | None,
    env: Mapping[str, str] | None = None,
    doc: Mapping[str, Any] | None = None,
) -> dict[str, Path]:
    """Write every report into the run's own directory; returns what was written where.

    DOC is the JSON document to write as ``result.json`` (built once by the caller so ``--json``
    prints the very same object); by default :func:`document`. JUnit and the step summary go through
    ``kvdoctor.report.reportable.publish`` like every other command's; a file that cannot be written is
    an ``InputError``, never an OSError traceback. (Writability was checked before the run by
    ``kvdoctor.report.preflight``.)
    """
    written: dict[str, Path] = {"run_dir": run_dir}
    try:
        written["json"] = run_dir / RESULT_FILE
        serialize.write(written["json"], document(result) if doc is None else doc)
        if result.records:
            table = result.record_dicts()
            for name in TABLE_FILES:
                path = run_dir / name
                rows.write(path, table)
                written[path.suffix[1:]] = path
    except OSError as exc:
        raise InputError(f"cannot write a report: {exc}") from None
    summary = reportable.publish(Report(result), junit_path=junit_path, env=env)
    if junit_path is not None:
        written["junit"] = junit_path
    if summary is not None:
        written["step_summary"] = summary
    return written
