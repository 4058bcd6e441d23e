"""``inspect`` and ``roundtrip`` reports as CI verdicts: JUnit cases and step-summary rows.

Both commands emit plain report dicts (what ``--json`` prints); these functions read only those, so
the JSON, the tables, the JUnit file and the GitHub summary can never disagree.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvdoctor._exceptions import InputError, InternalError, Interrupted, KvdoctorError
from kvdoctor.report import github, junit
from kvdoctor.report.envelope import Verdict
from kvdoctor.text import printable


def _hazard_status(severity: str, gated: bool) -> str:
    """An error hazard fails a case exactly when it fails the command (``--strict``): JUnit and the
    step summary must agree with the exit code; ungated, it is reported in the case's output."""
    return junit.FAILED if severity == "error" and gated else junit.PASSED


def _not_gated_note(severity: str, gated: bool) -> str:
    if severity == "error" and not gated:
        return " (error hazard not gated: pass --strict to fail on it)"
    if severity == "warning":
        return " (warning: reported, never gated)"
    return ""


def inspect_cases(report: Any, *, gated: bool = True) -> list[junit.Case]:
    """One case per hazard of ``inspect``'s typed result (any of its modes), plus the error-hazard
    verdict as its own case; errors fail only when GATED (``--strict``), otherwise each case carries
    the hazard, marked as not gated, as its output."""
    cases = []
    for h in report.hazards:
        status = _hazard_status(h.severity, gated)
        cases.append(
            junit.Case(
                h.code,
                status,
                message=h.message if status == junit.FAILED else "",
                details=f"{h.severity}: {h.message}{_not_gated_note(h.severity, gated)}",
            )
        )
    errors = [h.code for h in report.hazards if h.severity == "error"]
    note = " (not gated: pass --strict to fail on them)" if errors and not gated else ""
    cases.append(
        junit.Case(
            "no-error-hazards",
            junit.FAILED if errors and gated else junit.PASSED,
            message=", ".join(errors) if errors and gated else "",
            details=", ".join(errors) + note,
        )
    )
    return cases


def inspect_rows(report: Any, *, gated: bool = True) -> list[github.Row]:
    """Step-summary rows for ``inspect``'s typed result: the model's facts, then one row per hazard
    (an ungated error or a warning is a passing row whose value says so)."""
    from kvdoctor.core.sglang.inspect_result import InspectReport
    from kvdoctor.core.vllm.analysis import VllmReport

    rows = []
    if isinstance(report, InspectReport):  # not when kvdoctor refused the model and only SGLang answered
        backup = report.retraction_backup
        applies = "yes" if backup.applies else "no"
        rows += [
            github.Row("family", report.model.family, "", junit.PASSED),
            github.Row("retraction backup", f"{backup.backend} (applies: {applies})", "", junit.PASSED),
            github.Row("PD state types", ", ".join(report.pd_state_types) or "–", "", junit.PASSED),
        ]
    elif isinstance(report, VllmReport):
        hma = report.hybrid_kv_cache_manager
        rows += [
            github.Row("family", report.model.family, "", junit.PASSED),
            github.Row("hybrid KV cache manager", "on" if hma.enabled else "off", "", junit.PASSED),
            github.Row("preemption", f"{report.preemption.mode}, no backup", "", junit.PASSED),
        ]
    for h in report.hazards:
        status = _hazard_status(h.severity, gated)
        value = h.severity
        if status == junit.PASSED and h.severity in ("error", "warning"):  # reported, not gated: a warning row
            value += " (not gated)" if h.severity == "error" else " (reported, not gated)"
            status = "warning"
        rows.append(github.Row(h.code, value, "no error", status))
    return rows


def roundtrip_cases(result: Any) -> list[junit.Case]:
    """One case per row of ``roundtrip``'s typed result (``kvdoctor.state.run.RoundtripResult``): every
    component, the padding slot, the free slots, the residents, slot reuse. A case fails exactly when
    its row does, and the command exits 1 exactly when a row fails, so JUnit and the exit code agree.
    Launch-line errors SGLang would refuse are reported, not gated: a passing case each, saying so."""
    cases = []
    for row in result.components:
        message = ""
        if not row.ok:
            message = f"{row.mismatched_bytes} bytes differ; copies out/in {row.copies_out}/{row.copies_in}"
        cases.append(junit.Case(row.name, junit.PASSED if row.ok else junit.FAILED, message=message))
    for h in result.hazards:
        note = " (not gated: a hazard of this launch line; the round trip tests the pool's copy path only)"
        cases.append(junit.Case(h.code, junit.PASSED, details=f"{h.severity}: {h.message}{note}"))
    return cases


def roundtrip_rows(result: Any) -> list[github.Row]:
    """Step-summary rows for ``roundtrip``'s typed result, one per component row, same verdicts as JUnit."""
    return [
        github.Row(
            row.name,
            f"{row.mismatched_bytes:,} of {row.bytes:,} bytes differ",
            "0, one copy each way",
            junit.PASSED if row.ok else junit.FAILED,
        )
        for row in result.components
    ] + [github.Row(h.code, f"{h.severity} (not gated)", "no error", "warning") for h in result.hazards]


def publish(
    suite: str,
    cases: Sequence[junit.Case],
    summary: str,
    *,
    junit_path: Path | None,
    classname: str = "kvdoctor",
    env: Mapping[str, str] | None = None,
) -> Path | None:
    """Write the JUnit file when asked and append SUMMARY to ``$GITHUB_STEP_SUMMARY`` when it is set.

    Returns the summary file written, if any. A path that cannot be written is the user's input
    error (exit 2), never an OSError traceback; every command's reports share this contract.
    """
    try:
        if junit_path is not None:
            junit.write(junit_path, suite, cases, classname=classname)
        written = github.append_step_summary(summary, env)
    except OSError as exc:
        raise InputError(f"cannot write a report: {exc}") from None
    if _RUN is not None and _RUN.suite == suite and _RUN.state == _OPEN:
        _RUN.state = _VERDICT
    return written


# The run whose reports are not final yet (``errors_published`` opens it): ``open`` until its verdict
# is published, ``verdict`` after, ``error`` once an error case replaced it. ``unfinished`` reads it
# when the process ends, so a run stopped between its work and its verdict (a signal, output that
# could not be delivered) still leaves this run's error case, not an earlier run's pass.
_OPEN, _VERDICT, _ERROR = "open", "verdict", "error"


@dataclass
class _Run:
    suite: str
    title: str
    junit_path: Path | None
    state: str = _OPEN


_RUN: _Run | None = None


def forget() -> None:
    """A new run starts (the CLI may run more than once in one process): no run is open."""
    global _RUN
    _RUN = None


def run_error(exc: BaseException) -> tuple[int, str]:
    """The exit code and the words of a run that EXC stopped before its verdict."""
    if isinstance(exc, (KeyboardInterrupt, Interrupted)):
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        return Interrupted.exit_code_for(signum), _stopped_by(signum)
    error = exc if isinstance(exc, KvdoctorError) else InternalError.wrap(exc)
    return error.exit_code, printable(error)


def _stopped_by(signum: int) -> str:
    return f"{Interrupted.word(signum)} ({signal.Signals(signum).name}) before the run finished"


def _publish_error(run: _Run, exit_code: int, message: str) -> None:
    verdict = Verdict.of(exit_code)
    status = junit.FAILED if exit_code == 1 else junit.ERROR  # a finding (exit 1) fails; the rest errs
    case = junit.Case("kvdoctor", status, message=message, details=message)
    head = f"**{verdict.word}** (exit {exit_code}): {message}"
    run.state = _ERROR
    with contextlib.suppress(KvdoctorError):  # the run's own error is what the user must see
        publish(run.suite, [case], github.summary_markdown(run.title, head, []), junit_path=run.junit_path)


@contextlib.contextmanager
def errors_published(suite: str, title: str, *, junit_path: Path | None) -> Iterator[None]:
    """Run a command's work; if it ends without a verdict (bad input, exit 2; a kvdoctor bug, exit 4;
    Ctrl-C, 130; SIGTERM, 143), say so in the JUnit file and the step summary too, then let the error
    go on to its one line.

    Without this, the run that exits 2 writes nothing and a JUnit file left by an earlier green run
    would still be read as this run's pass. Enter it only once the report paths themselves were
    checked (``report.preflight``): a path that cannot be written is the error then, not a report.
    The run stays open after the block until its verdict is published; ``unfinished`` covers the
    stretch in between (rendering, writing stdout).
    """
    global _RUN
    run = _RUN = _Run(suite, title, junit_path)
    try:
        yield
    except (Exception, KeyboardInterrupt, Interrupted) as exc:
        _publish_error(run, *run_error(exc))
        raise


def unfinished(exit_code: int, reason: str | None) -> None:
    """At the end of the process: a run still open (or whose verdict the exit code contradicts: output
    lost, a signal after the verdict) gets its error case now. Exit 0 and 1 keep a published verdict."""
    global _RUN
    run, _RUN = _RUN, None
    if run is None or exit_code == 0 or run.state == _ERROR:
        return
    if run.state == _VERDICT and exit_code == 1:
        return
    if exit_code - 128 in (signal.SIGINT, signal.SIGTERM):  # a signal: said the way errors_published says it
        reason = _stopped_by(exit_code - 128)
    _publish_error(run, exit_code, reason or f"the run did not finish (exit {exit_code})")


def summary(title: str, verdict: Verdict, rows: Sequence[github.Row]) -> str:
    """The step summary, headed by the same verdict word the JSON and the last line of output carry
    (``passed``, ``passed with warnings``, ``FAILED``, ``ERROR``)."""
    return github.summary_markdown(title, f"**{verdict.word}**", rows)
