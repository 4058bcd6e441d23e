"""One ``PdEvalResult`` fed to every serializer: JSON, JUnit, step summary, per-question tables."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from kvdoctor._exceptions import InputError, one_line
from kvdoctor.pd.gate import FAILED
from kvdoctor.pd.result import EXIT_DEPLOYMENT, EXIT_INPUT, PdEvalResult
from kvdoctor.report import github, junit, records, serialize, verdicts
from kvdoctor.report.terminal import plain

if TYPE_CHECKING:
    from rich.console import Console

SUITE = "kvdoctor pd-eval"
RESULT_FILE = "result.json"
TABLE_FILES = ("questions.csv", "questions.parquet")
OUTPUT_FILES = (RESULT_FILE, *TABLE_FILES)  # what a run writes into its run directory (beside logs)


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "—" if value is None else format(value, spec)


def junit_cases(result: PdEvalResult) -> list[junit.Case]:
    """deployment, accuracy, retraction: a gate that never ran is an error, not a pass."""
    deployed = result.score is not None
    cases = [
        junit.Case(
            "deployment",
            junit.PASSED if deployed else junit.ERROR,
            "" if deployed else f"{result.exit_reason}: {result.message}",
            details="" if deployed else result.message,
            time_s=result.wall_s,
        )
    ]
    if not deployed:
        not_run = f"not run ({result.exit_reason})"
        cases += [junit.Case(name, junit.ERROR, not_run) for name in ("accuracy", "retraction")]
        return cases
    cases += [
        junit.Case(g.name, g.status, g.message if g.status != junit.PASSED else "", details=g.message)
        for g in result.gates
    ]
    return cases


def summary_rows(result: PdEvalResult) -> list[github.Row]:
    gates = {g.name: g.status for g in result.gates}
    s = result.score
    na = "error" if s is None else "passed"
    return [
        github.Row(
            "accuracy", _fmt(s.accuracy if s else None), f">= {result.threshold:.3f}", gates.get("accuracy", "error")
        ),
        github.Row(
            "retractions on decode",
            "—" if result.retractions is None else f"{result.retractions} ({result.retraction_source})",
            "> 0",
            gates.get("retraction", "error"),
        ),
        github.Row("invalid rate", _fmt(s.invalid_rate if s else None), "", na),
        github.Row("questions / shots", f"{result.num_questions} / {result.num_shots}", "", na),
        github.Row("latency", _fmt(s.latency_s if s else None, ".1f") + " s", "", na),
        github.Row("output throughput", _fmt(s.output_throughput if s else None, ".1f") + " token/s", "", na),
    ]


def status_line(result: PdEvalResult) -> str:
    verdict = "**PASSED**" if result.passed else f"**FAILED** ({result.exit_reason})"
    return f"{verdict} — `{result.model}` ({result.preset}); {result.message}"


def step_summary(result: PdEvalResult) -> str:
    details = {}
    if result.exit_code == EXIT_DEPLOYMENT and result.message:
        details["failure"] = result.message
    details["launch plan"] = "\n".join(
        " ".join(step["argv"]) or f"(external) {step['url']}"  # type: ignore[index]
        for step in result.plan.get("steps", [])  # type: ignore[union-attr]
    )
    return github.summary_markdown("kvdoctor pd-eval", status_line(result), summary_rows(result), details)


def annotations(result: PdEvalResult) -> list[str]:
    if result.passed:
        return [github.annotation("notice", status_line(result), title="pd-eval passed")]
    failed = [g for g in result.gates if g.status == FAILED]
    if not failed:
        return [github.annotation("error", result.message, title=f"pd-eval {result.exit_reason}")]
    return [github.annotation("error", g.message, title=f"pd-eval {g.reason}") for g in failed]


def write_all(
    result: PdEvalResult, run_dir: Path, *, junit_path: Path | None, env: Mapping[str, str] | None = None
) -> dict[str, Path]:
    """Write every report into the run's own directory; returns what was written where.

    JUnit and the step summary go through ``kvdoctor.report.verdicts.publish`` like every other
    command's; a file that cannot be written is an ``InputError``, never an OSError traceback.
    (Writability was checked before the run by ``kvdoctor.report.preflight``.)
    """
    written: dict[str, Path] = {"run_dir": run_dir}
    try:
        written["json"] = run_dir / RESULT_FILE
        serialize.write(written["json"], result.to_dict())
        if result.records:
            rows = result.record_dicts()
            for name in TABLE_FILES:
                path = run_dir / name
                records.write(path, rows)
                written[path.suffix[1:]] = path
    except OSError as exc:
        raise InputError(f"cannot write a report: {exc}") from None
    summary = verdicts.publish(
        SUITE, junit_cases(result), step_summary(result), junit_path=junit_path, classname="kvdoctor.pd_eval", env=env
    )
    if junit_path is not None:
        written["junit"] = junit_path
    if summary is not None:
        written["step_summary"] = summary
    return written


def finish(
    result: PdEvalResult,
    run_dir: Path,
    *,
    junit_path: Path | None,
    json_out: bool,
    console: Console,
    env: Mapping[str, str] | None = None,
) -> int:
    """Write the reports, show the result, annotate in GitHub Actions; returns the exit code.

    A report that cannot be written is one line on stderr and exit 2 (the result is still shown).
    A SIGTERM while writing ends the process with 143 after removing our temp files
    (``kvdoctor.report.atomic``).
    """
    from kvdoctor.pd import render

    exit_code = result.exit_code
    try:
        written = write_all(result, run_dir, junit_path=junit_path, env=env)
    except InputError as exc:
        print(plain(one_line(exc)), file=sys.stderr)
        written, exit_code = {}, EXIT_INPUT
    if json_out:
        print(serialize.dumps(result.to_dict()), end="")
    else:
        render.summary(console, result, written)
    if github.in_actions(env):
        for line in annotations(result):
            print(line, file=sys.stderr)
    return exit_code
