"""The end of a pd-eval: write every report, show the result, annotate in GitHub Actions.

Its own module so that the serializers (``kvdoctor.pd.report``, pure) and the terminal output
(``kvdoctor.pd.render``, rich) need not import each other: this one imports both, nothing imports it
back but the CLI, and the pd modules stay acyclic.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from kvdoctor._exceptions import EXIT_INPUT, InputError, one_line
from kvdoctor.pd import render
from kvdoctor.pd import report as pd_report
from kvdoctor.pd.result import PdEvalResult
from kvdoctor.report import github, reportable, serialize
from kvdoctor.text import plain

if TYPE_CHECKING:
    from rich.console import Console


def finish(
    result: PdEvalResult,
    run_dir: Path,
    *,
    junit_path: Path | None,
    json_out: bool,
    console: Console,
    env: Mapping[str, str] | None = None,
) -> pd_report.Report:
    """Write the reports, show the result, annotate in GitHub Actions; returns how the command ends (its
    exit code, verdict and status line: the run's own, or exit 2 when a report could not be written).

    The JSON document is built once: ``result.json`` and ``--json`` are the same object. A report
    that cannot be written is one line on stderr and exit 2 (the result is still shown, and the
    ``--json`` printed says exit 2, verdict error). A SIGTERM while writing ends the process with 143
    after removing our temp files (``kvdoctor.report.atomic``).
    """
    published = pd_report.Report(result)
    doc = reportable.json_document(published)
    try:
        written = pd_report.write_all(result, run_dir, junit_path=junit_path, env=env, doc=doc)
    except InputError as exc:
        print(plain(one_line(exc)), file=sys.stderr)
        written, published = {}, pd_report.Report(result, EXIT_INPUT)
        doc = reportable.json_document(published)
    if json_out:
        print(serialize.dumps(doc), end="")
    else:
        render.summary(console, result, written)
    if github.in_actions(env):
        for line in pd_report.annotations(result):
            print(line, file=sys.stderr)
    return published
