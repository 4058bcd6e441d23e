"""``inspect`` and ``roundtrip`` reports as CI verdicts: JUnit cases and step-summary rows.

Both commands emit plain report dicts (what ``--json`` prints); these functions read only those, so
the JSON, the tables, the JUnit file and the GitHub summary can never disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kvdoctor._exceptions import InputError
from kvdoctor.report import github, junit


def _hazard_status(severity: str, gated: bool) -> str:
    """An error hazard fails a case exactly when it fails the command (``--strict``): JUnit and the
    step summary must agree with the exit code; ungated, it is reported in the case's output."""
    return junit.FAILED if severity == "error" and gated else junit.PASSED


def inspect_cases(report: Mapping[str, Any], *, gated: bool = True) -> list[junit.Case]:
    """One case per hazard found, plus the error-hazard verdict as its own case; errors fail only when
    GATED (``--strict``), otherwise each case carries the hazard as its output."""
    cases = []
    for h in report["hazards"]:
        status = _hazard_status(h["severity"], gated)
        note = "" if gated or h["severity"] != "error" else " (error hazard not gated: pass --strict to fail on it)"
        cases.append(
            junit.Case(
                h["code"],
                status,
                message=h["message"] if status == junit.FAILED else "",
                details=f"{h['severity']}: {h['message']}{note}",
            )
        )
    errors = [h["code"] for h in report["hazards"] if h["severity"] == "error"]
    cases.append(
        junit.Case(
            "no-error-hazards",
            junit.FAILED if errors and gated else junit.PASSED,
            message=", ".join(errors),
            details=", ".join(errors),
        )
    )
    return cases


def inspect_rows(report: Mapping[str, Any], *, gated: bool = True) -> list[github.Row]:
    rows = []
    if "retraction_backup" in report:  # absent when kvdoctor refused the model and only SGLang answered
        backup = report["retraction_backup"]
        rows += [
            github.Row("family", report["model"]["family"], "", junit.PASSED),
            github.Row("retraction backup", f"{backup['backend']} (applies: {backup['applies']})", "", junit.PASSED),
            github.Row("PD state types", ", ".join(report["pd_state_types"]) or "-", "", junit.PASSED),
        ]
    rows += [
        github.Row(h["code"], h["severity"], "no error", _hazard_status(h["severity"], gated))
        for h in report["hazards"]
    ]
    return rows


def roundtrip_cases(report: Mapping[str, Any]) -> list[junit.Case]:
    """One case per component (and the padding slot, and the resident requests)."""
    cases = []
    for row in report["components"]:
        message = ""
        if not row["ok"]:
            message = f"{row['mismatched_bytes']} bytes differ; copies out/in {row['copies_out']}/{row['copies_in']}"
        cases.append(junit.Case(row["name"], junit.PASSED if row["ok"] else junit.FAILED, message=message))
    return cases


def roundtrip_rows(report: Mapping[str, Any]) -> list[github.Row]:
    return [
        github.Row(
            row["name"],
            f"{row['mismatched_bytes']} of {row['bytes']} bytes differ",
            "0, one copy each way",
            junit.PASSED if row["ok"] else junit.FAILED,
        )
        for row in report["components"]
    ]


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
        return github.append_step_summary(summary, env)
    except OSError as exc:
        raise InputError(f"cannot write a report: {exc}") from None


def summary(title: str, passed: bool, rows: Sequence[github.Row]) -> str:
    return github.summary_markdown(title, "**passed**" if passed else "**failed**", rows)
