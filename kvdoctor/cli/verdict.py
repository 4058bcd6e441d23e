"""The one line every command ends its human output with, the way pytest ends a run.

``verdict: passed — 9 components equal (4.6 s)``: the word comes from the same
:class:`~kvdoctor.report.envelope.Verdict` the ``--json`` report carries, so the last line a CI log
shows and the ``verdict`` key a dashboard reads can never disagree. Printed with markup off: the
detail may hold outside text.
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from kvdoctor.report.envelope import Verdict, verdict_line
from kvdoctor.text import printable

__all__ = ["STYLES", "print_verdict", "verdict_line"]

STYLES = {Verdict.PASS: "bold green", Verdict.WARN: "bold yellow", Verdict.FAIL: "bold red", Verdict.ERROR: "bold red"}


def print_verdict(console: Console, verdict: Verdict, detail: str) -> None:
    """Print the verdict line on CONSOLE, the word coloured by outcome (plain under NO_COLOR or a pipe)."""
    text = Text("verdict: ")
    text.append(verdict.word, style=STYLES[verdict])
    if detail:
        text.append(f" — {printable(detail)}")
    console.print(text, soft_wrap=False, overflow="fold")
