"""``kvdoctor sweep``'s run: the plan's cells on real servers, then every red cell repeated, minimized and bisected.

Each cell is one consistency run (:func:`kvdoctor.consistency.run.run`) of the sweep's base options with the
configuration's flags on the subject alone (``ConsistencyOptions.subject_args``: the pressured server, over PD its
decode); the reference keeps the server's defaults, so what the sweep varies is only what is tested. The runs
share one output folder, so one seeded checkpoint serves every cell. Every run is remembered by what it ran (model,
scenario, subject flags, release): the minimizer's probe of a configuration the plan already ran costs nothing.

Order: the values kvdoctor refuses everywhere are found first, before anything launches (``prepare``'s checks,
citing the server), and left out of the plan (listed, never dropped silently); then the plan's cells (this shard's
share); then, per red cell, ``repeats`` more runs (deterministic, or flaky with its rate), ddmin over the flags
that differ from the defaults (a deterministic red only), and bisection over the releases overlaid on the server
environment (``make sglang-overlay``), the installed release last. ``--budget`` is checked before every run: what
it cut is ``not-run``, and the coverage says what the cells reached.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import re
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from kvdoctor._exceptions import InputError, Interrupted
from kvdoctor.consistency import run as consistency
from kvdoctor.consistency import servers
from kvdoctor.consistency.prepared import ConsistencyOptions
from kvdoctor.consistency.result import ConsistencyResult
from kvdoctor.core.record import record
from kvdoctor.core.servers import facts, rule_model
from kvdoctor.sweep import covering, minimize, spaces
from kvdoctor.sweep.cell import FAULT_GATES, Outcome, Verdict, classify
from kvdoctor.sweep.options import SWEEP_WORKLOAD, SweepOptions
from kvdoctor.sweep.result import Cell, Minimized, Refusal, SweepResult
from kvdoctor.sweep.space import Configuration, Factor, Space

__all__ = ["SWEEP_WORKLOAD", "SweepOptions", "Sweeper", "overlays"]

Notify = Callable[[str, str], None]


@record(frozen=True)
class _Run:
    """One consistency run of the sweep's (or its refusal before launch)."""

    result: ConsistencyResult | None
    outcome: Outcome
    wall_s: float


def _release_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


def overlays(server: str, root: Path) -> dict[str, Path]:
    """SERVER's releases overlaid under ROOT (``make sglang-overlay``: ``ROOT/<server>-<version>/.installed``)."""
    found = {p.parent.name.removeprefix(f"{server}-"): p.parent for p in root.glob(f"{server}-*/.installed")}
    return dict(sorted(found.items(), key=lambda kv: _release_key(kv[0])))


def installed_release(server: str) -> str | None:
    """The release of SERVER this interpreter's servers run (its distribution's version; None: not installed)."""
    for dist in facts(server).distributions:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(dist)
    return None


class Sweeper:
    """One sweep of OPTIONS, progress to NOTIFY. :meth:`check` refuses bad input (exit 2) before anything launches;
    :meth:`plan` is the whole plan, nothing run; :meth:`run` runs this shard's cells and minimizes the red ones."""

    def __init__(
        self, options: SweepOptions, notify: Notify | None = None, clock: Callable[[], float] = time.monotonic
    ):
        self.o = options
        self.say = notify or (lambda _phase, _msg: None)
        self.clock = clock
        self._runs: dict[tuple[str, str, tuple[str, ...], str], _Run] = {}
        self._ruled: dict[tuple[str, tuple[str, ...], tuple[str, ...]], str | None] = {}
        self._plan: tuple[Configuration, ...] | None = None
        self.refused: list[Refusal] = []
        self.scenarios: tuple[str, ...] = ()
        self.space: Space | None = None
        self._bases: dict[tuple[str, str], ConsistencyOptions] = {}
        self._started = clock()
        self._budget_hit = False

    # -- before anything launches --------------------------------------------------------------------------------

    def check(self, *, environment: bool = True) -> None:
        """The sweep's input: models, scenarios, space, strength, shard, releases (exit 2, one line, nothing run);
        with ENVIRONMENT (a run, not a ``--plan``) the server environment this interpreter launches too."""
        o = self.o
        if not o.models:
            raise InputError("kvdoctor sweep needs one model or more")
        if o.repeats < 0:
            raise InputError(f"--repeat must be >= 0, got {o.repeats}")
        if o.budget_s is not None and not o.budget_s > 0:
            raise InputError(f"--budget must be > 0, got {o.budget_s:g} s")
        if o.strength < 1:
            raise InputError(f"--strength {o.strength}: at least 1 (1: every value once; 2: every pair of values)")
        self.space = spaces.load(o.server, o.space, o.topology)
        self.scenarios = self._scenarios()
        if environment:  # the server environment, before any launch
            first = self._bases[(o.models[0], self.scenarios[0])]
            consistency.preflight(consistency.prepare(first))
        self._releases()  # --release: each one overlaid here
        if o.shard is not None:
            covering.shard((), o.shard)  # the spelling, before any work
        self._refuse_values()

    def _scenarios(self) -> tuple[str, ...]:
        """The scenarios asked for, each checked on every model; by default every one the server runs on the
        topology, those it cannot listed as refused (a scenario asked for by name and refused is exit 2)."""
        asked = self.o.scenarios
        chosen = asked or tuple(servers.deployment(self.o.server).scenarios)
        kept = []
        for scenario in chosen:
            try:
                for model in self.o.models:
                    base = self.o.base(model, scenario)
                    consistency.prepare(base)
                    self._bases[(model, scenario)] = base
            except InputError as exc:
                if asked:
                    raise
                self.refused.append(Refusal(f"--scenario {scenario}", str(exc)))
                continue
            kept.append(scenario)
        if not kept:
            reasons = "; ".join(r.reason for r in self.refused)
            raise InputError(f"no scenario of --server {self.o.server} runs here: {reasons}")
        return tuple(kept)

    def _refuse_values(self) -> None:
        """Every value kvdoctor refuses on every model and scenario, out of the space (each listed with kvdoctor's
        reason); a factor left with its default alone goes too."""
        assert self.space is not None
        factors: list[Factor] = []
        for f in self.space.factors:
            values = []
            for value in f.values:
                words = f.words(value)
                reasons = [self._refusal(base, words) for base in self._bases.values()] if words else [None]
                if words and all(r is not None for r in reasons):
                    self.refused.append(Refusal(" ".join(words), str(reasons[0])))
                    continue
                ruled = self._ruled_everywhere(f, value) if words else None
                if ruled is not None:
                    self.refused.append(Refusal(" ".join(words), ruled))
                    continue
                values.append(value)
            if any(f.words(v) for v in values):
                factors.append(replace(f, values=tuple(values)))
        self.space = replace(self.space, factors=tuple(factors))

    def _ruled_everywhere(self, factor: Factor, value: object) -> str | None:
        """The server's start-up refusal of FACTOR at VALUE beside every value of every other flag (the rest at their
        defaults), on every model, by the rule model: such a value can meet nothing, so it leaves the plan (listed
        with the refusal) rather than turn every cell it is in refused. None when some pairing starts."""
        assert self.space is not None
        space, first = self.space, None
        pairings = [{}] + [{g.flag: w} for g in space.factors if g is not factor for w in g.values]
        for model in self.o.models:
            for other in pairings:
                config = space.configuration({**other, factor.flag: value})
                every = (*self.o.extra_args, *config.shared_argv(space))
                reason = self._ruled_out(model, config.subject_argv(space), every)
                if reason is None:
                    return None
                first = first or reason
        return first

    def _refusal(self, base: ConsistencyOptions, words: tuple[str, ...]) -> str | None:
        try:
            consistency.prepare(replace(base, subject_args=words))
        except InputError as exc:
            return str(exc)
        return None

    def plan(self) -> tuple[Configuration, ...]:
        """The whole plan, built once (the space is final once :meth:`check` has run)."""
        assert self.space is not None
        if self._plan is None:
            self._plan = covering.plan(self.space, self.o.strength)
        return self._plan

    # -- running ---------------------------------------------------------------------------------------------------

    def _left(self) -> float | None:
        if self.o.budget_s is None:
            return None
        return self.o.budget_s - (self.clock() - self._started)

    def _spent(self) -> bool:
        left = self._left()
        if left is not None and left <= 0:
            self._budget_hit = True
            return True
        return False

    def _run(self, model: str, scenario: str, config: Configuration, *, release: str = "", fresh: bool = False) -> _Run:
        """One consistency run of CONFIG: its subject flags on the subject, its shared flags on every server
        (remembered by what it ran, unless FRESH: a repeat)."""
        assert self.space is not None
        subject, shared = config.subject_argv(self.space), config.shared_argv(self.space)
        key = (model, scenario, (*subject, "|", *shared), release)
        if not fresh and key in self._runs:
            return self._runs[key]
        base = self._bases[(model, scenario)]
        path = (str(self._overlays()[release]),) if release else ()
        options = replace(base, subject_args=subject, extra_args=(*base.extra_args, *shared), server_path=path)
        t0 = self.clock()
        try:
            prepared = consistency.prepare(options)
            refused = self._ruled_out(model, subject, options.extra_args)  # the server's own start-up refusal
        except InputError as exc:
            refused = str(exc)
        if refused is not None:
            done = _Run(None, Outcome(Verdict.REFUSED, refused), 0.0)
        else:
            label = config.label(self.space)
            where = f"{model} · {scenario} · {label}" + (f" · {release}" if release else "")
            self.say("cell", f"{where}: running")
            result = consistency.run(prepared, notify=lambda phase, msg: self.say(phase, f"  {msg}"))
            signum = Interrupted.signal_of(result.exit_code)
            if signum is not None:
                raise Interrupted(signum)
            done = _Run(result, classify(result, scenario), round(self.clock() - t0, 1))
            self.say("cell", f"{where}: {done.outcome.verdict.value}: {done.outcome.reason}")
        self._runs[key] = done
        return done

    def _ruled_out(self, model: str, subject: tuple[str, ...], every: tuple[str, ...]) -> str | None:
        """What the server refuses at start-up for this configuration, by kvdoctor's rule model (each refusal cites
        the server's file and lines), before anything launches; None: the server decides. A launch the rule model
        cannot read (a flag it does not model) is left to the server."""
        key = (model, subject, every)
        if key not in self._ruled:
            self._ruled[key] = self._rule_refusal(model, subject, every)
        return self._ruled[key]

    def _rule_refusal(self, model: str, subject: tuple[str, ...], every: tuple[str, ...]) -> str | None:
        title = facts(self.o.server).title
        for role, argv in spaces.launches(self.o.server, self.o.topology, subject, every):
            try:
                refusals = rule_model(self.o.server).analyze(model, argv).refusals
            except InputError:
                continue
            if refusals:
                first = refusals[0]
                return f"{role}: {title} refuses it at start-up: {first.message} ({first.where}; kvdoctor's rule model)"
        return None

    def run(self) -> SweepResult:
        assert self.space is not None
        space = self.space
        t0 = self.clock()
        whole = self.plan()
        mine = covering.shard(whole, self.o.shard) if self.o.shard else tuple(enumerate(whole))
        plan_s = self.clock() - t0
        self.say(
            "plan", f"{len(whole)} configurations cover every {self.o.strength}-tuple of {len(space.factors)} flags"
        )
        cells: list[Cell] = []
        t1 = self.clock()
        for index, config in mine:
            for model in self.o.models:
                for scenario in self.scenarios:
                    cells.append(self._cell(model, scenario, index, config))
        cells_s = self.clock() - t1
        ran = [whole[c.index] for c in cells if c.verdict not in (Verdict.NOT_RUN, Verdict.REFUSED)]
        reached = covering.coverage(space, dict.fromkeys(ran), self.o.strength)
        t2 = self.clock()
        minimized: list[Minimized] = []
        for c in cells if self.o.minimize else ():
            if c.verdict is Verdict.RED:
                minimized.append(self._minimize(c, whole[c.index], cells, minimized))
        warnings = []
        if self._budget_hit:
            warnings.append(
                f"--budget {self.o.budget_s:g} s spent: {sum(c.verdict is Verdict.NOT_RUN for c in cells)} cells not "
                f"run; the cells that ran cover {reached.covered}/{reached.total} {self.o.strength}-tuples"
            )
        return SweepResult(
            server=self.o.server,
            topology=self.o.topology,
            models=self.o.models,
            scenarios=self.scenarios,
            space=space,
            strength=self.o.strength,
            plan=whole,
            shard=self.o.shard,
            cells=tuple(cells),
            refused=tuple(self.refused),
            coverage=reached,
            minimized=tuple(minimized),
            timings={
                "plan_s": round(plan_s, 3),
                "cells_s": round(cells_s, 1),
                "minimize_s": round(self.clock() - t2, 1),
                "wall_s": round(self.clock() - self._started, 1),
            },
            budget_s=self.o.budget_s,
            stopped_by_budget=self._budget_hit,
            inject=self.o.inject,
            fault_file=str(self.o.fault_file) if self.o.fault_file else None,
            output_dir=str(self.o.output_dir),
            releases=self._releases(),
            warnings=tuple(warnings),
        )

    def _cell(self, model: str, scenario: str, index: int, config: Configuration) -> Cell:
        assert self.space is not None
        argv = config.argv(self.space)
        label = config.label(self.space)
        if self._spent():
            return Cell(model, scenario, index, label, argv, Verdict.NOT_RUN, "the --budget was spent")
        done = self._run(model, scenario, config)
        return _cell_of(model, scenario, index, label, argv, done)

    # -- a red cell made small ---------------------------------------------------------------------------------------

    def _overlays(self) -> dict[str, Path]:
        found = overlays(self.o.server, self.o.overlay_root)
        if self.o.releases is None:
            return found
        missing = [r for r in self.o.releases if r not in found]
        if missing:
            raise InputError(
                f"--release {missing[0]}: no {self.o.overlay_root}/{self.o.server}-{missing[0]}/ (make sglang-overlay "
                f"VERSION={missing[0]})"
            )
        return {r: found[r] for r in self.o.releases}

    def _releases(self) -> tuple[str, ...]:
        installed = installed_release(self.o.server)
        older = [r for r in self._overlays() if installed is None or _release_key(r) < _release_key(installed)]
        return (*older, *((installed,) if installed else ()))

    def _red(self, cell: Cell, config: Configuration) -> bool:
        """One probe of the minimizer: is CELL red in CONFIG?"""
        if self._spent():
            raise _BudgetSpent
        return self._run(cell.model, cell.scenario, config).outcome.verdict is Verdict.RED

    def _settled(self, cell: Cell, config: Configuration, release: str) -> bool:
        """A bisection probe: red or green on RELEASE; anything else (refused, loud, vacuous) stops the bisection,
        since a release that did not run the check is neither where the bug starts nor where it is absent."""
        if self._spent():
            raise _BudgetSpent
        done = self._run(cell.model, cell.scenario, config, release=release)
        if done.outcome.verdict not in (Verdict.RED, Verdict.GREEN):
            raise _Unsettled(f"{release} was {done.outcome.verdict.value}: {done.outcome.reason}")
        return done.outcome.verdict is Verdict.RED

    def _baseline(
        self, cell: Cell, config: Configuration, cells: list[Cell]
    ) -> tuple[Configuration, int | None] | None:
        """The green configuration ddmin starts from: the server's defaults when they are green here (run now if
        this shard holds no defaults cell), else the plan's green cell nearest CONFIG; None when none is green."""
        assert self.space is not None
        defaults = self.space.defaults()
        if self._spent():
            raise _BudgetSpent
        if self._run(cell.model, cell.scenario, defaults).outcome.verdict is Verdict.GREEN:
            return defaults, None
        green = [c for c in cells if c.column == cell.column and c.verdict is Verdict.GREEN]
        if not green:
            return None
        plan = self.plan()
        near = min(green, key=lambda c: (len(plan[c.index].differs(config)), c.index))
        return plan[near.index], near.index

    def _minimize(self, cell: Cell, config: Configuration, cells: list[Cell], done: list[Minimized]) -> Minimized:
        """CELL repeated, then (a deterministic red) ddmin from a green baseline toward it, then bisected over
        releases. A red cell holding the very values an earlier one of its model and scenario was minimized to is
        said to, not minimized again."""
        assert self.space is not None
        space = self.space
        t0 = self.clock()
        small = Minimized(
            cell.model, cell.scenario, cell.index, 1, 1, None, cell.argv, (), None, "not bisected", cell.bundle
        )
        plan = self.plan()
        for m in done:
            if m.column == cell.column and m.kept is not None:
                red = plan[m.index]
                if all(config.get(f) == red.get(f) for f in m.kept):
                    note = f"holds what configuration {m.index} was minimized to ({m.words}): not minimized again"
                    return replace(small, note=note)
        runs, red_runs = 1, 1
        for _ in range(self.o.repeats):
            if self._spent():
                break
            runs += 1
            red_runs += self._run(cell.model, cell.scenario, config, fresh=True).outcome.verdict is Verdict.RED
        small = replace(small, runs=runs, red=red_runs)
        if red_runs < runs:
            note = f"flaky: red in {red_runs} of {runs} runs; not minimized (ddmin needs a deterministic red)"
            return replace(small, note=note, wall_s=round(self.clock() - t0, 1))
        try:
            start = self._baseline(cell, config, cells)
            if start is None:
                note = "red in every configuration tried: no green configuration to minimize against"
                return replace(small, note=note, wall_s=round(self.clock() - t0, 1))
            base, base_index = start
            found = minimize.ddmin(config.differs(base), lambda kept: self._red(cell, base.toward(config, kept)))
        except _BudgetSpent:
            return replace(small, note="the --budget was spent while minimizing", wall_s=round(self.clock() - t0, 1))
        smallest = base.toward(config, found.kept)
        run = self._run(cell.model, cell.scenario, smallest)  # remembered: ddmin ran it
        cause = ""
        if base_index is not None and found.kept:
            cause = f"{config.shown(space, found.kept)} (green with {base.shown(space, found.kept)})"
        small = replace(
            small,
            kept=found.kept,
            argv=smallest.argv(space),
            probes=tuple(
                (kept, self._run(cell.model, cell.scenario, base.toward(config, kept)).outcome.verdict.value)
                for kept, _ in found.probes  # each run once (remembered): its verdict, not just red or not
            ),
            bundle=(run.result.bundle if run.result is not None else None) or cell.bundle,
            baseline=base_index,
            cause=cause,
        )
        releases = self._releases()
        if len(releases) < 2:
            here = releases[0] if releases else "one release"
            small = replace(small, release_words=f"only {here} here: no older release overlaid to bisect")
        else:
            try:
                span = minimize.first_red(releases, lambda r: r == releases[-1] or self._settled(cell, smallest, r))
                small = replace(small, releases=span, release_words=span.says(releases))
            except _BudgetSpent:
                small = replace(small, release_words="the --budget was spent while bisecting")
            except _Unsettled as exc:
                small = replace(small, release_words=f"bisection stopped: {exc}")
        small = replace(small, wall_s=round(self.clock() - t0, 1))
        if small.bundle:
            _append_issue(Path(small.bundle), small, self.o)
        return small


class _BudgetSpent(Exception):
    """The --budget ran out inside the minimizer."""


class _Unsettled(Exception):
    """A release's run was neither red nor green: bisection cannot read it."""


def _cell_of(model: str, scenario: str, index: int, label: str, argv: tuple[str, ...], done: _Run) -> Cell:
    r = done.result
    if r is None:
        return Cell(model, scenario, index, label, argv, done.outcome.verdict, done.outcome.reason)
    first = r.first_divergence
    drift = r.first_drift
    where = None
    if first is not None:
        where = {"request": first.index, "position": first.position, "by": "token"}
    elif drift is not None:
        where = {"request": drift.get("request"), "position": drift.get("position"), "by": "logprobs"}
    fired = None
    fault_gates = [g for g in r.gates if g.name in FAULT_GATES]
    if fault_gates:
        fired = all(g.passed for g in fault_gates)
    return Cell(
        model,
        scenario,
        index,
        label,
        argv,
        done.outcome.verdict,
        done.outcome.reason,
        summary=r.summary_line(),
        identical=r.identical if r.total else None,
        total=r.total or None,
        retractions=r.retractions.get("pressured"),
        first_divergence=where,
        fault_fired=fired,
        run_dir=r.run_dir,
        bundle=r.bundle,
        wall_s=done.wall_s,
    )


def _append_issue(bundle: Path, m: Minimized, o: SweepOptions) -> None:
    """The sweep's findings at the end of the bundle's ``ISSUE.md`` (a file kvdoctor wrote)."""
    issue = bundle / "ISSUE.md"
    if not issue.is_file():
        return
    lines = [
        "",
        "## Found by `kvdoctor sweep`",
        "",
        f"- Configuration: `{' '.join(m.argv) or '(the server defaults)'}` on the subject "
        f"(`--topology {o.topology}`, `--scenario {m.scenario}`).",
        f"- Minimized: {m.words} (ddmin over the flags set away from the defaults; {len(m.probes)} probes).",
        f"- Red in {m.red} of {m.runs} runs.",
        f"- Releases: {m.release_words}.",
        "",
    ]
    with issue.open("a", encoding="utf-8") as fh:
        fh.write("\n".join(lines))
