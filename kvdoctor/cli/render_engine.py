"""The installed server's answers beside kvdoctor's (``inspect --engine sglang``), as a table.

Reads the typed :class:`~kvdoctor.core.sglang.inspect_result.SglangAnswers`; every value is printed as a
person writes it (``–``, yes/no, shapes as ``4x128``) and through ``safe`` (SGLang's messages, paths
and class names are outside text). Every column folds: nothing is cut with "…" at 80 columns.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kvdoctor.cli.layout import fits_whole, kv_table
from kvdoctor.core.sglang.inspect_result import SglangAnswers, shown
from kvdoctor.report.units import human
from kvdoctor.text import safe


def _value(value: Any) -> str:
    """A field's value: shapes as ``4x128 + 4x128``, lists joined, ``–``/yes/no for the rest."""
    if isinstance(value, (list, tuple)) and any(isinstance(v, (list, tuple)) for v in value):
        return " + ".join("x".join(str(d) for d in v) for v in value)
    return human(value)


def version_line(answers: SglangAnswers) -> str:
    """Which SGLang answered, and whether it is the version kvdoctor's rules restate."""
    version = human(answers.engine.version)
    if answers.differs_from_rules:
        return f"installed SGLang {version} differs from the rules revision (SGLang {answers.rules_version})"
    return f"installed SGLang {version} is the rules revision (SGLang {answers.rules_version})"


def render_beside(answers: SglangAnswers, console: Console | None = None) -> None:
    console = console or Console(emoji=False)
    engine = answers.engine
    title = f"kvdoctor beside SGLang {human(engine.version)} (live, {human(engine.path)})"
    names = sorted(set(answers.kvdoctor) | set(answers.fields))
    drifted = {d.field for d in answers.drift}
    skipped = answers.skipped
    rows = []
    for name in names:
        live = shown(name, answers.fields.get(name))
        component = name.split(".")[0] if "." in name else None
        if name in skipped or (component and (component in skipped or "components" in skipped)):
            why = skipped.get(name) or skipped.get(component or "") or skipped.get("components", "")
            agree = f"not asked: {safe(why)}"
        else:
            agree = "[bold red]DRIFT[/]" if name in drifted else "[green]yes[/]"
        rows.append((safe(name), safe(_value(answers.kvdoctor.get(name))), safe(_value(live)), agree))
    table = Table(title=safe(title), title_justify="left")
    table.add_column("field", overflow="fold", min_width=min(32, max((len(n) for n in names), default=5)))
    for col in ("kvdoctor", "SGLang", "agree"):
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*row)
    if not fits_whole(table, console):  # then each field is one block, its answers wrapped at words
        table = kv_table(safe(title))
        for name, ours, theirs, agree in rows:
            table.add_row(name, f"kvdoctor {ours}; SGLang {theirs}; agree: {agree}")
    console.print(table)
    lines = [version_line(answers)] if answers.rules_version else []
    if answers.kvdoctor_refusal:
        lines.append(f"kvdoctor refuses: {answers.kvdoctor_refusal}")
    if answers.refusal:
        lines.append(f"SGLang refuses ({answers.refusal.stage}): {answers.refusal.message}")
    lines += [f"stub: {stub}" for stub in answers.stubs]
    for line in lines:  # outside text: printed as Text, never parsed as markup
        console.print(Text(line, overflow="fold"))
    for drift in answers.drift:
        text = Text("KVD015-RULES-DRIFT", style="bold red")
        text.append(f" {drift.field}: kvdoctor {_value(drift.kvdoctor)}, SGLang {_value(drift.sglang)}")
        console.print(text, overflow="fold")
    state = f"{len(answers.drift)} drifting" if answers.drift else "no drift"
    console.print(Text(f"SGLang beside kvdoctor: {state} over {len(names)} fields"))
