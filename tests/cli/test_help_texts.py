"""Every command's ``--help``, read at 80 and 120 columns as a terminal (or a CI log) shows it: no Markdown
emphasis shown literally (``*and*``: the help is not rendered as Markdown) and no sentence broken by a hard
newline of the source (a docstring wrapped at 120 columns used to break mid-sentence at 80, and leave short
lines at 120).

The hard-newline check is exact for rich's greedy wrapping: inside a paragraph, a line that rich wrapped ends
only where the next word would not fit; a line that ends while the next line's first word would have fit on it
was broken by the source, not by the width.
"""

from __future__ import annotations

import itertools
import re

import pytest

from kvdoctor.cli import app

COMMANDS = [
    (),
    *((c.name,) for c in app.COMMANDS),
    ("bench",),
    *(("bench", c.name) for c in app.BENCH_COMMANDS),
]
WIDTHS = (80, 120)
EMPHASIS = re.compile(r"(?<![\w*])[*_][A-Za-z][^*_\n]*?[*_](?![\w*])")  # *and*, _and_: Markdown shown as text


def _help(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, words: tuple[str, ...], width: int):
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("TERM", "dumb")
    code = app._run([*words, "--help"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


def description(text: str) -> list[list[str]]:
    """The paragraphs (lists of lines) between the usage line and the first panel."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("Usage:"))
    while start < len(lines) and lines[start].strip():  # the usage line and its continuation
        start += 1
    paragraphs: list[list[str]] = [[]]
    for line in lines[start:]:
        if line.lstrip().startswith("╭"):
            break
        if line.strip():
            paragraphs[-1].append(line.rstrip())
        elif paragraphs[-1]:
            paragraphs.append([])
    return [p for p in paragraphs if p]


def hard_breaks(text: str, width: int) -> list[str]:
    """Lines of the description that end although the next line's first word would have fit on them."""
    broken = []
    for paragraph in description(text):
        for line, after in itertools.pairwise(paragraph):
            if len(line) + 1 + len(after.split()[0]) <= width - 2:  # one column of margin for the right pad
                broken.append(f"{line!r} / {after.split()[0]!r}")
    return broken


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("words", COMMANDS, ids=lambda w: " ".join(w) or "kvdoctor")
def test_help_has_no_literal_emphasis_and_no_sentence_broken_by_the_source(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, words: tuple[str, ...], width: int
) -> None:
    text = _help(capsys, monkeypatch, words, width)
    assert not EMPHASIS.findall(text), EMPHASIS.findall(text)
    assert not hard_breaks(text, width), hard_breaks(text, width)
    assert max(len(line) for line in text.splitlines()) <= width


def test_no_command_or_option_help_carries_a_hard_newline() -> None:
    """A command's help is one line per paragraph (the Commands panel lists its first), and option help one string
    each: a newline in either would break a panel's help column the same way."""
    import typer

    root = typer.main.get_command(app.app)
    groups = [(root, ())]
    seen = []
    while groups:
        group, path = groups.pop()
        for name in group.list_commands(None):
            command = group.commands[name]
            if hasattr(command, "list_commands"):
                groups.append((command, (*path, name)))
            for paragraph in (command.help or "").split("\n\n"):  # also what the Commands panels list
                assert "\n" not in paragraph.strip("\n"), f"{' '.join((*path, name))}: {paragraph!r}"
            for param in command.params:
                text = getattr(param, "help", None) or ""
                seen.append(name)
                assert "\n" not in text, f"{' '.join((*path, name))} {param.name}: {text!r}"
                assert not EMPHASIS.search(text), f"{' '.join((*path, name))} {param.name}: {text!r}"
    assert len(set(seen)) >= len(app.COMMANDS)


def test_the_check_sees_a_hard_break() -> None:
    """The detector itself: a paragraph broken short of the width is reported; a greedily wrapped one is not."""
    width = 80
    text = "\n".join(
        [
            " Usage: kvdoctor x [OPTIONS]",
            "",
            " A first line.",
            "",
            " Any flag may follow MODEL,",
            " or paste a whole launch line after `--`.",
            "╭─ Options ─╮",
        ]
    )
    assert hard_breaks(text, width) == ["' Any flag may follow MODEL,' / 'or'"]
    wrapped = " " + " ".join(["word"] * 15) + "\n " + "tail"
    assert not hard_breaks(f" Usage: x\n\n{wrapped}\n╭", width)
    assert EMPHASIS.findall("gate on accuracy *and* on retraction") == ["*and*"]
    assert not EMPHASIS.findall("│ *    model  <str> [required] conv_state a*b")
