"""GitHub Actions: a Markdown job summary (``$GITHUB_STEP_SUMMARY``) and workflow annotations.

Conventions from GitHub's docs: the summary is appended (other commands of the step may write
too), is capped at 1 MiB per step (over it the whole upload is dropped, so we cut our part), and
is written only when the variable is set. Annotation messages escape ``%``, CR and LF; property
values also ``:`` and ``,``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from kvdoctor.core.record import record

STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
STEP_SUMMARY_LIMIT = 1024 * 1024
_TRUNCATED = "\n\n_(summary truncated to fit GitHub's 1 MiB step-summary limit)_\n"


@record(frozen=True)
class Row:
    """One row of the step summary's table."""

    check: str
    value: str
    threshold: str
    status: str  # passed | warning | failed | skipped | error


_ICON = {"passed": "✅ pass", "warning": "⚠️ warning", "failed": "❌ fail", "skipped": "⚠️ skipped", "error": "💥 error"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def summary_markdown(
    title: str, status_line: str, rows: Sequence[Row], details: Mapping[str, str] | None = None
) -> str:
    """h3 title, status line first, a metric | value | threshold | result table, then details."""
    lines = [f"### {title}", "", status_line, "", "| check | value | threshold | result |", "|---|---|---|---|"]
    lines += [
        f"| {_cell(r.check)} | {_cell(r.value)} | {_cell(r.threshold)} | {_ICON.get(r.status, r.status)} |"
        for r in rows
    ]
    for summary, body in (details or {}).items():
        lines += [
            "",
            f"<details><summary>{_cell(summary)}</summary>",
            "",
            "```text",
            body.replace("```", "ʼʼʼ"),
            "```",
            "</details>",
        ]
    return "\n".join(lines) + "\n\n"


def step_summary_file(env: Mapping[str, str] | None = None) -> str | None:
    """The file ``$GITHUB_STEP_SUMMARY`` names (ENV, or this process's environment); None when unset or empty."""
    return (os.environ if env is None else env).get(STEP_SUMMARY_ENV) or None


def append_step_summary(markdown: str, env: Mapping[str, str] | None = None) -> Path | None:
    """Append to the file ``$GITHUB_STEP_SUMMARY`` names; None (nothing written) when unset.

    The path goes through ``kvdoctor.report.target`` like every report: a device or FIFO is written
    through, a symlink's target is appended to, and anything else is refused in one line.
    """
    target_name = step_summary_file(env)
    if not target_name:
        return None
    from kvdoctor.report.atomic import write_through  # the writers, only when there is a summary to write
    from kvdoctor.report.target import REGULAR, resolve

    path = Path(target_name)
    target = resolve(path, f"${STEP_SUMMARY_ENV}")
    used = target.real.stat().st_size if target.kind == REGULAR and not target.through else 0
    budget = STEP_SUMMARY_LIMIT - used
    data = markdown.encode("utf-8")
    if len(data) > budget:
        keep = max(0, budget - len(_TRUNCATED.encode()))
        data = data[:keep].decode("utf-8", errors="ignore").encode() + _TRUNCATED.encode()
        data = data[: max(0, budget)]
    if target.through:
        write_through(target, data, what=f"${STEP_SUMMARY_ENV}", append=True)
        return path
    target.real.parent.mkdir(parents=True, exist_ok=True)
    with target.real.open("ab") as fh:
        fh.write(data)
    return path


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(level: str, message: str, *, title: str | None = None) -> str:
    """``::error title=…::message`` (level: error, warning or notice)."""
    if level not in ("error", "warning", "notice"):
        raise ValueError(f"annotation level {level!r}")
    props = f" title={escape_property(title)}" if title else ""
    return f"::{level}{props}::{escape_data(message)}"


def in_actions(env: Mapping[str, str] | None = None) -> bool:
    return (os.environ if env is None else env).get("GITHUB_ACTIONS") == "true"
