"""``kvdoctor consistency MODEL [options] [-- SERVER FLAGS]``: a real SGLang (or, ``--server vllm``, vLLM)
deployment under forced retraction (vLLM: preemption) against a roomy reference, every greedy token compared.

Exit codes: 0 every token identical with retraction proven; 1 a divergence above the noise floor, or a
guard with no teeth (no retraction, a retracting reference, degenerate output, a stand-in called, a fault that
never fired); 2 bad input (including a model the server cannot run on this device, named with its file:line, and a
fault file kvdoctor cannot use);
3 the deployment failed; 130/143 after Ctrl-C/SIGTERM (everything started was stopped).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import typer

from kvdoctor._exceptions import EXIT_GATE, EXIT_PASS, InputError
from kvdoctor.cli.command import CommandRun, ErrorCase
from kvdoctor.cli.typed_command import command, shown_option
from kvdoctor.consistency import fault_file, scenarios
from kvdoctor.consistency.prepared import ConsistencyOptions
from kvdoctor.core import faults
from kvdoctor.core.consistency_facts import consistency_facts
from kvdoctor.core.paths import StatePath
from kvdoctor.core.servers import DEFAULT_SERVER, facts
from kvdoctor.deploy.plan import LaunchPlan, render
from kvdoctor.report import reportable, serialize

if TYPE_CHECKING:
    from rich.console import Console

    from kvdoctor.consistency.deploy import Deployment
    from kvdoctor.consistency.prepared import Prepared
    from kvdoctor.consistency.report import Report
    from kvdoctor.consistency.result import ConsistencyResult, FaultFileDoc

MAX_SHOWN = 12  # diverging requests listed on the terminal (all are in the JSON)


def _consistency(ctx: typer.Context, options: ConsistencyOptions, *, dry_run: bool, json_out: bool) -> None:
    ConsistencyRun(ctx, options, dry_run=dry_run, json_out=json_out)()


DRY_RUN = shown_option("dry_run", "--dry-run", help="Print the launch plan and stop.")
JSON_OUT = shown_option("json_out", "--json", help="Print the result as JSON (schema: kvdoctor schema consistency).")

consistency = command(
    ConsistencyOptions,
    _consistency,
    name="consistency",
    doc="""Launch the server (SGLang, or vLLM with --server vllm) twice on the same model and prompts, a roomy reference
    and a pressured deployment that must retract (preempt), and compare every greedy token. The server's own flags
    after `--` go to every server.""",
    shown=(DRY_RUN, JSON_OUT),
    before="junit_path",
)


class ConsistencyRun(CommandRun["ConsistencyResult", "Report"]):
    """One ``kvdoctor consistency``: the steps of ``kvdoctor.cli.command`` around the run of
    :class:`kvdoctor.api.ConsistencyJob` (the job :func:`kvdoctor.api.consistency` executes), printing its head,
    progress and findings."""

    def __init__(self, ctx: typer.Context, options: ConsistencyOptions, *, dry_run: bool, json_out: bool) -> None:
        self.ctx, self.asked = ctx, options
        self.dry_run, self.json_out = dry_run, json_out

    def check(self) -> None:
        from rich.console import Console

        from kvdoctor.api._consistency import ConsistencyJob  # the run's floors (httpx)

        extra = tuple(self.ctx.args)
        if extra and not extra[0].startswith("-"):
            raise InputError(f"unexpected argument {extra[0]!r} (server flags go after --)")
        self.console = Console(stderr=self.json_out)  # with --json, stdout is the JSON alone: progress on stderr
        self.status = None if self.json_out else self.console  # the JSON's verdict is the status line then
        options = replace(self.asked, extra_args=extra)
        self.job = ConsistencyJob(
            options,
            on_event=lambda phase, msg: _event(self.console, phase, msg),
            on_plan=lambda prepared, preview: _print_head(self.console, prepared, preview),
        )
        self.options = options

    def preflight(self) -> None:
        if not self.dry_run:
            self.job.preflight()

    def error_case(self) -> ErrorCase:
        case = self.job.error_case()
        return case if not self.dry_run else ErrorCase(case.suite, case.title, None)

    def work(self) -> ConsistencyResult | None:
        if not self.dry_run:
            return self.job.work()
        _, preview = self.job.prepare()
        if self.json_out:
            print(serialize.dumps({"deployment": preview.to_dict(), "enablers": preview.enablers}), end="")
        else:
            steps = LaunchPlan(self.options.model, "consistency", preview.steps, None, external=False)
            self.console.print(render(steps), markup=False, highlight=False, soft_wrap=True)
        return None

    def deliver(self, result: ConsistencyResult) -> Report:
        print_result(self.console, result)
        published = self.job.report(result)  # writes the run's own record (result.json)
        if self.json_out:
            print(serialize.dumps(reportable.json_document(published)), end="")
        self.job.publish(published)
        return published


def _event(console: Console, phase: str, message: str) -> None:
    console.print(f"[{phase}] {message}", markup=False, highlight=False, soft_wrap=True)


def _print_head(console: Console, prepared: Prepared, preview: Deployment) -> None:
    o = prepared.options
    kind = prepared.kind
    w = o.workload
    p = console.print
    shrunk = ", shrunk" if o.shrink else ""
    on = f" · {o.server}" if o.server != DEFAULT_SERVER.value else ""
    p(f"kvdoctor consistency: {o.model} ({kind.family}{shrunk}) · {o.topology} · {o.device}{on}", markup=False)
    p(
        f"workload: {w.requests} prompts × {w.prompt_tokens} token ids (seed {w.seed}), greedy, {w.max_new_tokens} new "
        f"tokens, {w.concurrency} in flight, logprobs on; pools: reference {preview.reference_pool:,} tokens, "
        f"pressured {preview.pressured_pool:,} tokens",
        markup=False,
        soft_wrap=True,
    )
    enablers = preview.enablers
    if enablers:
        title = facts(o.server).title
        p(f"CPU enablers (changes kvdoctor makes so {title} runs here; none applies on a GPU):", markup=False)
        for e in enablers:
            p(f"  - {e.name} [{e.where}]: {e.why}", markup=False, soft_wrap=True)
    for line in scenarios.get(o.scenario).head_lines(prepared, preview):
        p(line, markup=False, soft_wrap=True)
    if o.fault_file is not None:
        found = fault_file.read(o.fault_file)
        p(f"fault: --fault-file {found.shown} ({found.name}): {found.describe()}", markup=False, soft_wrap=True)
    if o.inject:
        words = consistency_facts(o.server)
        hook = words.fault_hook(_path(o.inject, o.server))
        p(f"fault: --inject {o.inject} {words.fault_site.format(hook=hook)}", markup=False)


def _path(name: str, server: str) -> StatePath | None:
    """The state path the fault NAME acts on on SERVER (None: not one of its registered faults)."""
    try:
        return faults.get(name, server=server, target=faults.Target.SERVER).path
    except KeyError:
        return None


def print_result(console: Console, result: ConsistencyResult, *, gates: bool = True) -> None:
    """The run's findings, one line each; ``gates=False`` leaves out the ``gate`` lines for a caller whose own
    table shows each gate (pd-eval --oracle tokens), so no gate is printed twice."""
    r = result
    p = console.print
    if r.weights_digest:
        p(f"weights sha256: {r.weights_digest} (every server loads {r.model_dir})", markup=False, soft_wrap=True)
    for role, secs in r.launch_s.items():
        p(f"launch: {role} ready in {secs:.0f} s", markup=False)
    for b in r.bursts:
        p(
            f"run: {b.name}: {b.output_tokens} tokens in {b.wall_s:.1f} s ({b.tokens_per_s:.0f} tok/s), median "
            f"{b.median_distinct_tokens:g} distinct of {b.median_length:g}",
            markup=False,
        )
    if r.retractions:
        noun = facts(r.server).plural()
        counts = ", ".join(f"{role} {n}" for role, n in r.retractions.items())
        p(f"{noun}: {counts} (from {r.retraction_source})", markup=False)
    scenario = scenarios.of(r)
    for line in scenario.result_lines(r):
        p(line, markup=False, soft_wrap=True)
    if r.noise_floor:
        p(r.noise_floor["sentence"], markup=False, soft_wrap=True)
    red = [d for d in r.requests if d.diverged]
    for d in red[:MAX_SHOWN]:
        margin = f", reference top-2 margin {d.ref_margin:.3g}" if d.ref_margin is not None else ""
        noise = " (within the noise floor)" if d.within_noise else ""
        p(
            f"  request {d.index}: identical for {d.identical_prefix} tokens, then {d.ref_token} → {d.got_token}"
            f"{margin}; max |Δlogprob| before it {d.max_abs_dlogprob:.2g}{noise}",
            markup=False,
        )
    if len(red) > MAX_SHOWN:
        p(f"  … {len(red) - MAX_SHOWN} more diverging requests in the JSON", markup=False)
    if r.fault is not None:
        f, words = r.fault, consistency_facts(r.server)
        on = scenario.acted_on  # what the fault acted on (vLLM's tally words it)
        tally = words.fault_tally.format(installed=f.installed, backups=f.backups, restores=f.restores, on=on)
        p(
            f"fault {f.name} in {f.role}: {tally}" + (f"; {words.fault_problem}: {f.refused}" if f.refused else ""),
            markup=False,
        )
    mine = getattr(r, "fault_file", None)
    if mine:
        p(fault_file_line(mine), markup=False, soft_wrap=True)
    for warning in r.warnings:
        p(f"warning: {warning}", markup=False, soft_wrap=True)
    for g in r.gates if gates else ():
        p(f"gate {g.name}: {'pass' if g.passed else 'FAIL'}: {g.message}", markup=False, soft_wrap=True)
    if r.exit_code not in (EXIT_PASS, EXIT_GATE) and r.message:
        p(r.message, markup=False, soft_wrap=True)


def fault_file_line(record: FaultFileDoc) -> str:
    """``--fault-file``'s record in one line: the fault, its file, and per wrap whether a server installed it and how
    often it fired while armed."""
    wraps = ", ".join(
        f"{w['target']} ({w['role']}) "
        + (f"fired {w['fired']}" if w["installed"] else "never installed")
        + (f", {w['unchanged']} unchanged" if w["unchanged"] else "")
        for w in record["wraps"]
    )
    loaded = f"loaded by {record['loaded']} server process{'es' if record['loaded'] != 1 else ''}"
    refused = f"; refused: {record['refused']}" if record["refused"] else ""
    return f"fault file {record['name']} ({record['path']}): {loaded}; {wraps or 'no wraps read'}{refused}"
