"""The end of a pd-eval: write every report, show the result, annotate in GitHub Actions.

Its own module so that the serializers (``kvdoctor.pd.reporting``, pure) and the terminal output
(``kvdoctor.pd.render``, rich) need not import each other: this one imports both, nothing imports it
back but the CLI, and the pd modules stay acyclic.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kvdoctor._exceptions import InputError, one_line
from kvdoctor.pd import render, reporting
from kvdoctor.pd.result import EXIT_INPUT, PdEvalResult
from kvdoctor.report import github, serialize
from kvdoctor.report.envelope import Verdict
from kvdoctor.report.terminal import plain

if TYPE_CHECKING:
    from rich.console import Console


@dataclass(frozen=True)
class Finished:
    """How the command ends: its exit code, the verdict that code stands for, and the line's detail."""

    exit_code: int
    verdict: Verdict
    detail: str


def finish(
    result: PdEvalResult,
    run_dir: Path,
    *,
    junit_path: Path | None,
    json_out: bool,
    console: Console,
    env: Mapping[str, str] | None = None,
) -> Finished:
    """Write the reports, show the result, annotate in GitHub Actions; returns how the command ends.

    The JSON document is built once: ``result.json`` and ``--json`` are the same object. A report
    that cannot be written is one line on stderr and exit 2 (the result is still shown, and the
    ``--json`` printed says exit 2, verdict error). A SIGTERM while writing ends the process with 143
    after removing our temp files (``kvdoctor.report.atomic``).
    """
    exit_code = result.exit_code
    doc = reporting.document(result)
    try:
        written = reporting.write_all(result, run_dir, junit_path=junit_path, env=env, doc=doc)
    except InputError as exc:
        print(plain(one_line(exc)), file=sys.stderr)
        written, exit_code = {}, EXIT_INPUT
        doc = reporting.document(result, exit_code=exit_code)
    if json_out:
        print(serialize.dumps(doc), end="")
    else:
        render.summary(console, result, written)
    if github.in_actions(env):
        for line in reporting.annotations(result):
            print(line, file=sys.stderr)
    return Finished(exit_code, Verdict(doc["verdict"]), reporting.verdict_detail(result, exit_code))
