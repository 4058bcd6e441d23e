"""The sweep as a page a person looks at: one self-contained HTML file (no script, no fetch, inline style).

The matrix comes first: a row per configuration (its changed flags), a column per model and scenario, each cell
coloured by its verdict and linked to its finding. Under it, per red (loud, vacuous) cell, what a maintainer needs:
the first divergence, the flags it is red because of, the release range, the reproduction bundle and the run
directory. Then what was refused (never dropped silently), the coverage and the timings. Every outside string
(flags, reasons, paths) is escaped; the page is held to its structure in a real headless Chromium
(``tests/sweep/test_page_browser.py``).
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from kvdoctor.report.atomic import write_text
from kvdoctor.sweep.cell import Verdict
from kvdoctor.sweep.result import Cell, SweepResult

__all__ = ["COLOURS", "render", "write"]

COLOURS = {
    Verdict.GREEN: "#2da44e",
    Verdict.RED: "#cf222e",
    Verdict.LOUD: "#8250df",
    Verdict.VACUOUS: "#bf8700",
    Verdict.REFUSED: "#8c959f",
    Verdict.ERROR: "#1f2328",
    Verdict.NOT_RUN: "#eaeef2",
}
_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #1f2328; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 24px 0 8px; }
table.matrix { border-collapse: collapse; } .matrix th, .matrix td { border: 1px solid #d0d7de; padding: 4px 8px; }
.matrix th.config { text-align: left; font-family: ui-monospace, monospace; font-weight: normal; }
.matrix td.cell { width: 88px; text-align: center; color: #fff; font-weight: 600; }
.matrix td.cell a { color: inherit; text-decoration: none; display: block; }
.matrix td.v-not-run { color: #57606a; }
.legend span { display: inline-block; padding: 2px 8px; margin-right: 6px; color: #fff; border-radius: 3px; }
.legend span.v-not-run { color: #57606a; }
section.finding { border-left: 4px solid #cf222e; padding: 4px 12px; margin: 12px 0; }
section.finding:target { background: #fff8c5; }
code { font-family: ui-monospace, monospace; background: #f6f8fa; padding: 0 3px; }
dl { display: grid; grid-template-columns: max-content auto; gap: 2px 12px; } dt { color: #57606a; }
"""


def _css() -> str:
    colours = "".join(f".v-{v.value} {{ background: {c}; }}\n" for v, c in COLOURS.items())
    return _STYLE + colours


def _anchor(c: Cell) -> str:
    safe = "".join(ch if ch.isalnum() else "-" for ch in f"{c.model}-{c.scenario}")
    return f"cell-{c.index}-{safe}"


def _matrix(r: SweepResult) -> str:
    columns = [(m, s) for m in r.models for s in r.scenarios]
    by = {c.key: c for c in r.cells}
    indices = sorted({c.index for c in r.cells})
    head = "".join(f'<th scope="col">{escape(m)}<br>{escape(s)}</th>' for m, s in columns)
    rows = []
    for i in indices:
        label = r.plan[i].label(r.space)
        tds = []
        for m, s in columns:
            c = by.get((m, s, i))
            if c is None:
                tds.append('<td class="cell v-not-run" data-verdict="absent">·</td>')
                continue
            word = escape(c.verdict.value)
            title = escape(f"{c.verdict.value}: {c.reason}", quote=True)
            inner = f'<a href="#{_anchor(c)}">{word}</a>' if c.verdict.finding else word
            tds.append(f'<td class="cell v-{word}" data-verdict="{word}" title="{title}">{inner}</td>')
        rows.append(
            f'<tr data-configuration="{i}"><th scope="row" class="config">{escape(label)}</th>{"".join(tds)}</tr>'
        )
    return (
        '<table class="matrix" id="matrix"><thead><tr><th scope="col">configuration</th>'
        f"{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _finding(r: SweepResult, c: Cell) -> str:
    m = r.minimized_for(c)
    items: list[tuple[str, str]] = [
        ("verdict", f"{c.verdict.value}: {c.reason}"),
        ("configuration", " ".join(c.argv) or "the server's defaults"),
        ("run", c.summary),
    ]
    if c.first_divergence:
        d = c.first_divergence
        items.append(
            ("first divergence", f"request {d.get('request')}, position {d.get('position')} (by {d.get('by')})")
        )
    if m is not None:
        items += [
            ("minimized", m.words),
            ("runs", f"red in {m.red} of {m.runs}"),
            ("releases", m.release_words),
        ]
    bundle = (m.bundle if m is not None else None) or c.bundle
    if bundle:
        items.append(("bundle", bundle))
    if c.run_dir:
        items.append(("run directory", c.run_dir))
    rows = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in items)
    title = escape(f"{c.model} · {c.scenario} · {c.label}")
    attrs = f'class="finding" id="{_anchor(c)}" data-verdict="{c.verdict.value}"'
    return f"<section {attrs}><h3>{title}</h3><dl>{rows}</dl></section>"


def render(r: SweepResult, *, verdict: str) -> str:
    """The page for R, whose one-word outcome is VERDICT."""
    counts = ", ".join(f"{r.count(v)} {v.value}" for v in Verdict if r.count(v))
    cov = r.coverage
    legend = "".join(f'<span class="v-{v.value}">{v.value}</span>' for v in Verdict)
    findings = "".join(_finding(r, c) for c in r.cells if c.verdict.finding) or "<p>No finding.</p>"
    refused = "".join(f"<li><code>{escape(x.what)}</code>: {escape(x.reason)}</li>" for x in r.refused)
    timings = ", ".join(f"{k} {v:g}" for k, v in r.timings.items())
    fault = r.inject or r.fault_file
    shard = f" · shard {escape(r.shard)}" if r.shard else ""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>kvdoctor sweep: {escape(', '.join(r.models))} ({escape(r.server)})</title>"
        f"<style>{_css()}</style></head><body>"
        f'<h1>kvdoctor sweep: <span id="verdict">{escape(verdict)}</span></h1>'
        f'<p id="head">{escape(r.server)} · {escape(r.topology)} · {escape(", ".join(r.models))} · space '
        f"{escape(r.space.source)} · {len(r.plan)} configurations, strength {r.strength}{shard}"
        f"{' · fault ' + escape(fault) if fault else ''}</p>"
        f'<p id="counts">{escape(counts)}; {cov.covered}/{cov.total} {cov.strength}-tuples covered</p>'
        f'<p class="legend">{legend}</p>{_matrix(r)}'
        f'<h2>Findings</h2><div id="findings">{findings}</div>'
        f'<h2>Refused</h2><ul id="refused">{refused or "<li>nothing</li>"}</ul>'
        f'<h2>Timings</h2><p id="timings">{escape(timings)}</p>'
        "</body></html>\n"
    )


def write(path: Path, r: SweepResult, *, verdict: str) -> None:
    """The page at PATH, written whole or not at all."""
    write_text(path, render(r, verdict=verdict))
