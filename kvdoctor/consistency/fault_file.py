"""``kvdoctor consistency --fault-file PATH``: the user's own fault (:mod:`kvdoctor.engines.faultkit`) in a run, for
either server.

- :func:`check` (before anything starts, exit 2, one line): the file is read in a child interpreter
  (:func:`kvdoctor.engines.fault_file.read`: never in kvdoctor's process, a symlink resolved, re-read whenever its
  bytes change), each wrap's role must exist in the run's topology (``prefill``/``decode``: ``--topology pd``;
  ``single``: ``--topology single``; ``any``: either), and ``--inject`` is refused beside it (one fault per run: the
  verdict must say whose fault diverged).
- :func:`place` (the plan): the servers of the roles the file names get ``KVDOCTOR_FAULT_FILE=ROLE:PATH`` and the
  run's arm file; the fault fires only while the run arms it (the pressured burst: PD's prefill is shared with the
  reference, and must not fault the reference's requests).
- :func:`judge` (after the run): the ``fault-fired`` gate from the servers' log: every wrap must have been installed
  and fired at least once, and none refused; otherwise the run is red for that reason (``no_teeth`` or
  ``fault_failed``), never a pass and never a divergence credited to a fault that did not run. The result gets the
  file's record (:func:`record`: its name, path, and per wrap whether it was installed and how often it fired), as
  ``--inject`` gets its ``fault``.

The fault's name (:func:`name`) is that of the file the path resolves to: the name the run arms, the servers log
and the gate reads.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from kvdoctor._exceptions import EXIT_GATE, EXIT_PASS, InputError
from kvdoctor.consistency import attribution, gates
from kvdoctor.consistency.attribution import UNREQUESTED
from kvdoctor.consistency.result import FaultFileDoc, FaultFileWrapDoc, Result, settled
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


def read(path: Path | str) -> reader.FaultFile:
    """The fault file at PATH, read in a child (cached per content: an edited file is read again); InputError (exit 2,
    one line) when it cannot be used."""
    try:
        return reader.read(path)
    except FaultFileError as exc:
        raise InputError(f"--fault-file {exc}") from None


def check(o: ConsistencyOptions) -> ConsistencyOptions:
    """Refuse (exit 2) a fault file this run cannot use: unreadable, no fault, a role its topology lacks, or
    ``--inject`` beside it. Returns O with the file's path resolved (a symlink to the file it leads to), the path
    every later step may use."""
    if o.fault_file is None:
        return o
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
    return dataclasses.replace(o, fault_file=found.path)


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
    """The fault's name (what the run arms and the servers log: the file the path resolves to, without ``.py``), or
    None without ``--fault-file``. From the path alone: the file is not read again."""
    if o.fault_file is None:
        return None
    try:
        return reader.fault_name(reader.resolve(o.fault_file))
    except FaultFileError as exc:
        raise InputError(f"--fault-file {exc}") from None


def judge(o: ConsistencyOptions, log: hook_log.EventLog, result: Result) -> Result:
    """RESULT with the fault file's record (:func:`record`) and its ``fault-fired`` gate, read from the servers' LOG (a
    failing one first: the run's reason is then that the fault did not run, not what diverged). The wraps judged are
    those of the version the servers logged loading, when kvdoctor read that version (an edit during the run is not
    judged as if the servers had run it)."""
    if o.fault_file is None:
        return result
    found, unreadable = _judged(o.fault_file, log)
    doc = record(found, log, unreadable)
    result = dataclasses.replace(result, fault_file=doc)
    if result.exit_code not in (EXIT_PASS, EXIT_GATE):
        return result
    g = gate(found, log, doc) if unreadable is None else gates.Gate(GATE, False, "fault_failed", unreadable)
    # the server's reader took this fault's events for a fault nobody asked for: judged again without them
    others = hook_log.EventLog(tuple(e for e in log if not _is_mine(e, found.name)))
    kept = [*attribution.unrequested_gates(others, o.inject), *(x for x in result.gates if x.reason != UNREQUESTED)]
    judged = [*kept, g] if g.passed else [g, *kept]
    return settled(dataclasses.replace(result, gates=judged))


def _judged(path: Path | str, log: hook_log.EventLog) -> tuple[reader.FaultFile, str | None]:
    """The fault file to judge the run by: the version the servers logged loading (its sha256) when this process read
    it, else the file as it is now; and, when it can no longer be read, why (the gate is then red)."""
    fault = reader.fault_name(reader.resolve(path))
    for digest in dict.fromkeys(_loaded_digests(log, fault)):
        found = reader.cached(path, digest)
        if found is not None:
            return found, None
    try:
        return reader.read(path), None
    except FaultFileError as exc:
        why = f"fault file {fault} cannot be read after the run, so its wraps cannot be judged: {exc}"
        return reader.FaultFile(reader.resolve(path), fault, (), given=Path(path)), why


def _loaded_digests(log: hook_log.EventLog, fault: str) -> list[str]:
    """The sha256 of each ``fault-file-loaded`` line of FAULT (the bytes each server process ran)."""
    out = []
    for detail in log.details("fault-file-loaded"):
        parts = detail.split(" ")
        if parts and parts[0] == fault:
            out += [p.removeprefix("sha256=") for p in parts[1:] if p.startswith("sha256=")]
    return out


def record(found: reader.FaultFile, log: hook_log.EventLog, refused: str | None = None) -> FaultFileDoc:
    """The result's ``fault_file``: FOUND's name, paths and sha256, how many server processes loaded it, the first
    refusal, and per wrap (file order) whether a server installed it and how often it fired (and was left unchanged)
    while armed, from the servers' LOG."""
    fault = found.name
    refusals = [d for d in log.details("fault-refused") if d.split(" ", 1)[0] in (fault, f"{fault}:")]
    loaded = [d for d in log.details("fault-file-loaded") if d.split(" ", 1)[0] == fault]
    wraps: list[FaultFileWrapDoc] = []
    for w in found.wraps:
        key = (w.target, w.role)
        wraps.append(
            {
                "target": w.target,
                "role": w.role,
                "installed": any(r[:2] == key for r in _rows(log, "fault-installed", fault)),
                "fired": sum(r[:2] == key for r in _rows(log, "fault-fired", fault)),
                "unchanged": sum(r[:2] == key for r in _rows(log, "fault-unchanged", fault)),
            }
        )
    given = found.given if found.given is not None else found.path
    return {
        "name": fault,
        "path": str(found.path),
        "given": str(given),
        "sha256": found.sha256 or None,
        "loaded": len(loaded),
        "refused": refused or (refusals[0] if refusals else None),
        "wraps": wraps,
    }


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


def gate(found: reader.FaultFile, log: hook_log.EventLog, doc: FaultFileDoc | None = None) -> gates.Gate:
    """Every wrap of FOUND installed and fired at least once in the servers (LOG), nothing refused; read from FOUND's
    record (:func:`record`: DOC when the caller has it)."""
    doc = record(found, log) if doc is None else doc
    fault = found.name
    if doc["refused"]:
        return gates.Gate(GATE, False, "fault_failed", f"fault file {fault} failed inside the server: {doc['refused']}")
    counts = []
    for w, seen in zip(found.wraps, doc["wraps"], strict=True):
        if not seen["installed"]:
            return gates.Gate(GATE, False, "no_teeth", _not_installed(found, w, log, doc["loaded"] > 0))
        if seen["fired"] == 0:
            left = [r[2] for r in _rows(log, "fault-unchanged", fault) if r[:2] == (w.target, w.role)]
            why = f"called {len(left)} time(s) while armed, each left unchanged ({left[0]})" if left else "never called"
            return gates.Gate(
                GATE,
                False,
                "no_teeth",
                f"guard has no teeth: fault file {fault} never fired: {w.target} ({w.role}) was {why} while the "
                "fault was armed (the pressured burst)",
            )
        counts.append(f"{w.target} ({w.role}) {seen['fired']}")
    return gates.Gate(GATE, True, "passed", f"fault file {fault} fired: {', '.join(counts)}")


def _not_installed(found: reader.FaultFile, w: reader.Declared, log: hook_log.EventLog, loaded: bool) -> str:
    head = f"guard has no teeth: fault file {found.name}'s wrap of {w.target} ({w.role}) was never installed"
    if not loaded:
        return f"{head}: no server process loaded the fault file (kvdoctor's site hook or plugin did not run there)"
    missing = [r[2] for r in _rows(log, "fault-unresolved", found.name) if r[:2] == (w.target, w.role)]
    if missing:
        return f"{head}: {missing[0].lstrip(': ')} (the target cannot be imported in that server)"
    return f"{head}: no process of that role imported {w.module} (a wrong module, or one that role never runs)"
