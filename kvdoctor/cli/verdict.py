"""The one line every command ends its human output with, the way pytest ends a run.

``verdict: passed — 9 components equal (4.6 s)``: the word comes from the same
:class:`~kvdoctor.report.envelope.Verdict` the ``--json`` report carries, so the last line a CI log
shows and the ``verdict`` key a dashboard reads can never disagree. Printed with markup off: the
detail may hold outside text.
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from kvdoctor.report.envelope import Verdict
from kvdoctor.text import printable

STYLES = {Verdict.PASS: "bold green", Verdict.WARN: "bold yellow", Verdict.FAIL: "bold red", Verdict.ERROR: "bold red"}


def verdict_line(verdict: Verdict, detail: str) -> str:
    """The plain text of the line: ``verdict: <word> — <detail>``."""
    return f"verdict: {verdict.word}" + (f" — {printable(detail)}" if detail else "")


def print_verdict(console: Console, verdict: Verdict, detail: str) -> None:
    """Print the verdict line on CONSOLE, the word coloured by outcome (plain under NO_COLOR or a pipe)."""
    text = Text("verdict: ")
    text.append(verdict.word, style=STYLES[verdict])
    if detail:
        text.append(f" — {printable(detail)}")
    console.print(text, soft_wrap=False, overflow="fold")
