"""Rich output for a terminal: the plan, launch events, a progress bar, the summary table.

Everything shown here may carry text from outside (model names, paths, launcher strings, a
server's log tail inside a failure message): it goes through ``kvdoctor.text`` so no
control character or ANSI sequence reaches the terminal and no ``[...]`` is read as rich markup.

Readable anywhere: at 80 columns, piped, under NO_COLOR, a cell folds onto a second line rather than
being cut with "…", and command lines and paths are printed whole (``soft_wrap``) so they stay
copy-pasteable. The rows are ``kvdoctor.pd.report.summary_rows``, the same the step summary shows.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kvdoctor._exceptions import EXIT_GATE, EXIT_PASS
from kvdoctor.deploy import plan as plan_mod
from kvdoctor.deploy.client import Completion
from kvdoctor.pd.report import summary_rows
from kvdoctor.pd.result import PdEvalResult
from kvdoctor.pd.run import Prepared
from kvdoctor.text import markup, plain

if TYPE_CHECKING:
    from kvdoctor.pd import tokens


def plan_text(prepared: Prepared) -> str:
    s = prepared.settings
    data = prepared.data
    lines = [
        f"# kvdoctor pd-eval: {prepared.options.model} (preset {prepared.plan.preset})",
        plan_mod.render(prepared.plan),
        f"# eval: GSM8K {s.num_shots}-shot, {s.num_questions or 'all'} questions, "
        f"threshold {s.threshold:.2f}, max {s.max_new_tokens} new tokens, "
        f"{s.parallel} in flight, /{'generate' if s.api == 'generate' else 'v1/completions'}",
        f"# data: {data.path} (sha256 {data.sha256}, {data.source}, "
        f"{'the official test split' if data.official else 'NOT the official test split'})"
        if data
        else "# data: not available offline; it will be downloaded and sha256-checked",
    ]
    if prepared.prediction is not None:
        lines.append(f"# prediction: {prepared.prediction.message()}")
    return "\n".join(lines)


def print_plan(console: Console, prepared: Prepared) -> None:
    # soft_wrap: command lines must stay copy-pasteable, never re-wrapped by rich.
    console.print(plain(plan_text(prepared)), soft_wrap=True, markup=False, highlight=False)


def tokens_plan_text(prepared: tokens.Prepared) -> str:
    """``--oracle tokens``: both deployments (shell-ready), the oracle's workload, the CPU enablers, the fault."""
    c = prepared.consistency
    o, d, w = c.options, prepared.preview, c.options.workload
    shrunk = ", shrunk" if o.shrink else ""
    lines = [
        f"# kvdoctor pd-eval: {prepared.options.model} (preset {d.preset}) · oracle tokens · {o.device}"
        f" ({c.kind.family}{shrunk})",
        plan_mod.render(prepared.launch_plan),
        f"# oracle: {w.requests} prompts × {w.prompt_tokens} seeded token ids (seed {w.seed}), greedy, "
        f"{w.max_new_tokens} new tokens, {w.concurrency} in flight, logprobs on; every token against the reference "
        f"(repeated for the noise floor); decode pools: reference {d.reference_pool:,} tokens, pressured "
        f"{d.pressured_pool:,} tokens (must retract)",
    ]
    if d.enablers:
        lines.append("# CPU enablers (changes kvdoctor makes so SGLang runs here; none applies on a GPU):")
        lines += [f"#   - {e.name} [{e.where}]: {e.why}" for e in d.enablers]
    if o.inject:
        lines.append(f"# fault: --inject {o.inject} inside {d.injected_role} (site hook on Req.offload_kv_cache)")
    return "\n".join(lines)


def print_tokens_plan(console: Console, prepared: tokens.Prepared) -> None:
    console.print(plain(tokens_plan_text(prepared)), soft_wrap=True, markup=False, highlight=False)


def event(console: Console, message: str) -> None:
    """One launch event line (``decode: healthy at …``), printed as plain text."""
    console.print(plain(message), markup=False, highlight=False, soft_wrap=True)


EVAL_STEP = "GSM8K eval through the router"


@contextlib.contextmanager
def progress(console: Console) -> Iterator[Callable[[int], Callable[[int, Completion], None]]]:
    """The bar of the eval: it names the step running (the GSM8K questions), M of N answered, time."""
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )

    def start(total: int) -> Callable[[int, Completion], None]:
        task = bar.add_task(EVAL_STEP, total=total)
        return lambda _index, _done: bar.advance(task)

    with bar:
        yield start


STATUS_STYLE = {"passed": "green", "failed": "bold red", "skipped": "yellow", "error": "bold red"}


def summary(console: Console, result: PdEvalResult, written: Mapping[str, Path]) -> None:
    """The result table, then where each report went (paths whole, never folded or cut)."""
    table = Table(title=markup(f"kvdoctor pd-eval: {result.model} ({result.preset})"), show_lines=False)
    for column in ("check", "value", "threshold", "result"):
        table.add_column(column, overflow="fold")
    for row in summary_rows(result):
        table.add_row(
            markup(row.check),
            markup(row.value),
            markup(row.threshold),
            f"[{STATUS_STYLE.get(row.status, '')}]{markup(row.status)}[/]",
        )
    console.print(table)
    if result.exit_code not in (EXIT_PASS, EXIT_GATE) and result.message:
        console.print(plain(f"failure: {result.message}"), markup=False, highlight=False)
    for name, path in written.items():
        console.print(plain(f"  {name}: {path}"), markup=False, highlight=False, soft_wrap=True)
