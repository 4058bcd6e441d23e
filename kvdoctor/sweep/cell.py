"""One cell of a sweep (a model, a scenario, a configuration), and what its consistency run says of it.

A cell's verdict is read from its run's gates, never from its exit code alone (a sweep that calls a cell green
when its path never ran would be the confident wrong answer kvdoctor exists to prevent):

- ``green``: every token within the noise floor AND the scenario's proof gate present and passed (retractions,
  prefix hits, transfers counted). A fault that did not fire in this configuration (``--inject``, ``--fault-file``)
  leaves a cell green: the fault does not show here, which is what a sweep under a fault asks;
- ``red``: the tokens (or logprobs) diverged, and every gate that gives the check its teeth passed;
- ``vacuous``: the check had no teeth (the path did not run, a retracting reference, degenerate output, a stand-in
  called): never green;
- ``loud``: the subject died after it served (exit 3 once a burst ran): a crash is found too, loudly;
- ``refused``: the configuration never ran: kvdoctor refused it before launch (its reason, citing the server), or
  the server refused it at start-up (its own last log line);
- ``error``: kvdoctor itself failed (exit 4); ``not-run``: the ``--budget`` was spent before the cell's turn.

Pure: reads results, starts nothing.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from kvdoctor._exceptions import EXIT_DEPLOYMENT, EXIT_GATE, EXIT_PASS
from kvdoctor.core.paths import proof_gate
from kvdoctor.core.record import record

if TYPE_CHECKING:
    from kvdoctor.consistency.result import ConsistencyResult

__all__ = ["DIVERGENCE_GATES", "FAULT_GATES", "Outcome", "Verdict", "classify"]

DIVERGENCE_GATES = frozenset({"tokens", "logprobs"})
FAULT_GATES = frozenset({"fault-fired"})  # --inject's and --fault-file's: in a sweep a cell's fault may not fire
UNFIRED = "no_teeth"  # the fault-fired gate's reason when the fault never fired (its other reds: it failed inside)


class Verdict(str, Enum):
    GREEN = "green"
    RED = "red"
    LOUD = "loud"
    VACUOUS = "vacuous"
    REFUSED = "refused"
    ERROR = "error"
    NOT_RUN = "not-run"

    @property
    def finding(self) -> bool:
        """A verdict the sweep reports as a finding (the command exits 1 for one)."""
        return self in (Verdict.RED, Verdict.LOUD, Verdict.VACUOUS)


@record(frozen=True)
class Outcome:
    """A cell's verdict and its reason, one line."""

    verdict: Verdict
    reason: str


def classify(result: ConsistencyResult, scenario: str) -> Outcome:
    """RESULT's cell verdict under SCENARIO (whose proof gate a green needs)."""
    if result.exit_code == EXIT_DEPLOYMENT:
        why = result.summary_line()
        return Outcome(Verdict.LOUD if result.bursts else Verdict.REFUSED, why)
    if result.exit_code not in (EXIT_PASS, EXIT_GATE):
        return Outcome(Verdict.ERROR, result.summary_line())
    failed = [g for g in result.gates if not g.passed]
    unfired = [g for g in failed if g.name in FAULT_GATES and g.reason == UNFIRED]
    teeth = [g for g in failed if g.name not in DIVERGENCE_GATES and g not in unfired]
    if teeth:
        return Outcome(Verdict.VACUOUS, teeth[0].message)
    proof = proof_gate(scenario)
    if proof is not None and not any(g.name == proof and g.passed for g in result.gates):
        return Outcome(Verdict.VACUOUS, f"no passed {proof} gate: the path is not proven to have run")
    diverged = [g for g in failed if g.name in DIVERGENCE_GATES]
    if diverged:
        return Outcome(Verdict.RED, diverged[0].message)
    said = next((g.message for g in result.gates if g.name == proof), "every gate passed")
    if unfired:
        return Outcome(Verdict.GREEN, f"{said}; the fault did not fire here ({unfired[0].message})")
    return Outcome(Verdict.GREEN, said)
