"""``kvdoctor consistency --fault-file PATH``: the user's own fault (:mod:`kvdoctor.engines.faultkit`) in a run, for
either server.

- :func:`check` (before anything starts, exit 2, one line): the file is read (:func:`kvdoctor.engines.fault_file.load`),
  each wrap's role must exist in the run's topology (``prefill``/``decode``: ``--topology pd``; ``single``:
  ``--topology single``; ``any``: either), and ``--inject`` is refused beside it (one fault per run: the verdict
  must say whose fault diverged).
- :func:`place` (the plan): the servers of the roles the file names get ``KVDOCTOR_FAULT_FILE=ROLE:PATH`` and the
  run's arm file; the fault fires only while the run arms it (the pressured burst: PD's prefill is shared with the
  reference, and must not fault the reference's requests).
- :func:`judge` (after the run): the ``fault-fired`` gate from the servers' log: every wrap must have been installed
  and fired at least once, and none refused; otherwise the run is red for that reason (``no_teeth`` or
  ``fault_failed``), never a pass and never a divergence credited to a fault that did not run.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from kvdoctor._exceptions import EXIT_GATE, EXIT_PASS, InputError
from kvdoctor.consistency import attribution, gates
from kvdoctor.consistency.attribution import UNREQUESTED
from kvdoctor.consistency.result import Result, settled
from kvdoctor.engines import arming, hook_log
from kvdoctor.engines import fault_file as reader
from kvdoctor.engines.faultkit import FaultFileError

if TYPE_CHECKING:
    from kvdoctor.consistency.deploy import Deployment
    from kvdoctor.consistency.prepared import ConsistencyOptions

ARM_FILE = "armed"  # in the run directory, where the run arms the fault (kvdoctor.engines.arming)
# The plan's server roles that take a fault file, per topology: plan role -> the file's role it runs.
SERVER_ROLES = {
    "single": {"pressured": "single"},
    "pd": {"prefill": "prefill", "decode-pressured": "decode"},
}
NEEDS = {"prefill": "--topology pd", "decode": "--topology pd", "single": "--topology single"}
GATE = "fault-fired"

_read: dict[str, reader.FaultFile] = {}  # one read per file per process: the plan and the gate see what check saw


def read(path: Path) -> reader.FaultFile:
    """The fault file at PATH, read once per process; InputError (exit 2, one line) when it cannot be used."""
    key = str(path.expanduser().resolve())
    if key not in _read:
        try:
            _read[key] = reader.load(Path(key))
        except FaultFileError as exc:
            raise InputError(f"--fault-file {exc}") from None
    return _read[key]


def check(o: ConsistencyOptions) -> None:
    """Refuse (exit 2) a fault file this run cannot use: unreadable, no fault, a role its topology lacks, or
    ``--inject`` beside it."""
    if o.fault_file is None:
        return
    if o.inject:
        raise InputError(
            f"--inject {o.inject} and --fault-file {o.fault_file} cannot be combined: one fault per run, so the "
            "verdict names whose fault diverged (run them one at a time)"
        )
    found = read(o.fault_file)
    for w in found.wraps:
        if w.role != "any" and w.role not in SERVER_ROLES.get(o.topology, {}).values():
            raise InputError(
                f"--fault-file {found.path} wraps {w.target} in role {w.role}, which needs {NEEDS[w.role]}; this run "
                f"is --topology {o.topology}"
            )


def place(deployment: Deployment, o: ConsistencyOptions, base: Path) -> Deployment:
    """DEPLOYMENT with the fault file sent to the servers of the roles it wraps (their env), and an arm file (BASE:
    the run directory) so the run arms it for the pressured burst only."""
    if o.fault_file is None:
        return deployment
    found = read(o.fault_file)
    arm = deployment.arm_file or str(base / ARM_FILE)
    roles = SERVER_ROLES.get(deployment.topology, {})
    steps = []
    for step in deployment.steps:
        role = roles.get(step.role)
        if role is not None and any(w.role in (role, "any") for w in found.wraps):
            env = {**step.env, reader.FAULT_FILE_ENV: reader.env_value(role, found.path), arming.ARM_ENV: arm}
            step = dataclasses.replace(step, env=env)
        steps.append(step)
    return dataclasses.replace(deployment, steps=tuple(steps), arm_file=arm)


def name(o: ConsistencyOptions) -> str | None:
    """The fault's name (what the run arms and the servers log), or None without ``--fault-file``."""
    return reader.fault_name(o.fault_file) if o.fault_file is not None else None


def judge(o: ConsistencyOptions, log: hook_log.EventLog, result: Result) -> Result:
    """RESULT with the ``fault-fired`` gate of the fault file, read from the servers' LOG (a failing one first: the
    run's reason is then that the fault did not run, not what diverged)."""
    if o.fault_file is None or result.exit_code not in (EXIT_PASS, EXIT_GATE):
        return result
    found = read(o.fault_file)
    g = gate(found, log)
    # the server's reader took this fault's events for a fault nobody asked for: judged again without them
    others = hook_log.EventLog(tuple(e for e in log if not _is_mine(e, found.name)))
    kept = [*attribution.unrequested_gates(others, o.inject), *(x for x in result.gates if x.reason != UNREQUESTED)]
    judged = [*kept, g] if g.passed else [g, *kept]
    return settled(dataclasses.replace(result, gates=judged))


def _is_mine(e: hook_log.Event, fault: str) -> bool:
    return e.name.startswith(hook_log.FAULT_EVENT) and e.detail.split(" ", 1)[0].rstrip(":") == fault


def _rows(log: hook_log.EventLog, event: str, fault: str) -> list[tuple[str, str, str]]:
    """(target, role, the rest) of every EVENT line of FAULT."""
    out = []
    for detail in log.details(event):
        parts = detail.split(" ", 3)
        if len(parts) >= 3 and parts[0] == fault:
            out.append((parts[1], parts[2].rstrip(":"), parts[3] if len(parts) > 3 else ""))
    return out


def gate(found: reader.FaultFile, log: hook_log.EventLog) -> gates.Gate:
    """Every wrap of FOUND installed and fired at least once in the servers (LOG), nothing refused."""
    fault = found.name
    refused = [d for d in log.details("fault-refused") if d.split(" ", 1)[0] in (fault, f"{fault}:")]
    if refused:
        return gates.Gate(GATE, False, "fault_failed", f"fault file {fault} failed inside the server: {refused[0]}")
    loaded = any(d.split(" ", 1)[0] == fault for d in log.details("fault-file-loaded"))
    counts = []
    for w in found.wraps:
        key = (w.target, w.role)
        installed = any(r[:2] == key for r in _rows(log, "fault-installed", fault))
        fired = sum(r[:2] == key for r in _rows(log, "fault-fired", fault))
        if not installed:
            return gates.Gate(GATE, False, "no_teeth", _not_installed(found, w, log, loaded))
        if fired == 0:
            left = [r[2] for r in _rows(log, "fault-unchanged", fault) if r[:2] == key]
            why = f"called {len(left)} time(s) while armed, each left unchanged ({left[0]})" if left else "never called"
            return gates.Gate(
                GATE,
                False,
                "no_teeth",
                f"guard has no teeth: fault file {fault} never fired: {w.target} ({w.role}) was {why} while the "
                "fault was armed (the pressured burst)",
            )
        counts.append(f"{w.target} ({w.role}) {fired}")
    return gates.Gate(GATE, True, "passed", f"fault file {fault} fired: {', '.join(counts)}")


def _not_installed(found: reader.FaultFile, w: reader.Wrap, log: hook_log.EventLog, loaded: bool) -> str:
    head = f"guard has no teeth: fault file {found.name}'s wrap of {w.target} ({w.role}) was never installed"
    if not loaded:
        return f"{head}: no server process loaded the fault file (kvdoctor's site hook or plugin did not run there)"
    missing = [r[2] for r in _rows(log, "fault-unresolved", found.name) if r[:2] == (w.target, w.role)]
    if missing:
        return f"{head}: {missing[0].lstrip(': ')} (the target cannot be imported in that server)"
    return f"{head}: no process of that role imported {w.module} (a wrong module, or one that role never runs)"
