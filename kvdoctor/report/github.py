"""GitHub Actions: a Markdown job summary (``$GITHUB_STEP_SUMMARY``) and workflow annotations.

Conventions from GitHub's docs: the summary is appended (other commands of the step may write
too), is capped at 1 MiB per step (over it the whole upload is dropped, so we cut our part), and
is written only when the variable is set. Annotation messages escape ``%``, CR and LF; property
values also ``:`` and ``,``.

The summary is Markdown that GitHub renders with raw HTML allowed, and much of what it shows comes from
outside (a model name, a path, a server's message, a bug's title). :func:`text` makes such a string render
as the text it is: HTML's ``&`` and ``<`` as entities, Markdown's emphasis, code, link, strike-through and table
characters backslash-escaped, one line. :func:`summary_markdown` passes the title and every cell through
it; the status line is kvdoctor's own Markdown (``**passed**``), so only raw HTML is neutralised there.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from kvdoctor.core.record import record
from kvdoctor.text import printable

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


# Markdown's inline punctuation that can change what a reader sees: a backslash, code spans, emphasis and
# strong (``*``), links and images (``[``, ``]``), strike-through (``~``), table cells (``|``). ``_`` only
# where it can open or close emphasis (at a word's edge): ``conv_state`` stays as written.
_MARKDOWN = re.compile(r"[\\`*\[\]~|]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
_HTML = {"&": "&amp;", "<": "&lt;"}  # no tag, comment or entity opens without one of these (a ``>`` alone is text)


def _html(value: str) -> str:
    return "".join(_HTML.get(ch, ch) for ch in value)


def text(value: object) -> str:
    """VALUE (outside text) as Markdown that renders as exactly that text, on one line (line breaks become
    spaces, escape sequences go): no HTML tag, entity, emphasis, code span, link or table cell break can come
    out of it."""
    return _MARKDOWN.sub(lambda m: "\\" + m.group(0), _html(printable(value)))


def _head(status_line: str) -> str:
    """The status line, kvdoctor's own Markdown (``**FAILED** (exit 2): ...``), on one line with raw HTML
    neutralised: outside text a caller put in it cannot become a tag, whether or not the caller escaped it
    with :func:`text` (which it should: ``*`` or ``|`` in it would still be read as Markdown). ``&`` is left as
    it is: an entity that :func:`text` wrote stays one, and no entity can open a tag."""
    return printable(status_line).replace("<", "&lt;")


def summary_markdown(
    title: str, status_line: str, rows: Sequence[Row], details: Mapping[str, str] | None = None
) -> str:
    """h3 title, status line first, a metric | value | threshold | result table, then details."""
    head = _head(status_line)
    lines = [f"### {text(title)}", "", head, "", "| check | value | threshold | result |", "|---|---|---|---|"]
    lines += [
        f"| {text(r.check)} | {text(r.value)} | {text(r.threshold)} | {_ICON.get(r.status, r.status)} |" for r in rows
    ]
    for summary, body in (details or {}).items():
        lines += [
            "",
            f"<details><summary>{_html(printable(summary))}</summary>",  # HTML: Markdown is not read here
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
