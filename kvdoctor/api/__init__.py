"""kvdoctor's public Python API: each command as a function, its options as keyword arguments.

``kvdoctor.api.consistency("lfm2-1.2b", shrink=True, topology="pd")`` runs what ``kvdoctor consistency lfm2-1.2b
--shrink --topology pd`` runs, and returns the typed result every reporter reads (the ``--json`` document, the JUnit
file and the step summary are made from it), with

- ``passed``: exit 0 (the check ran its subject and found nothing gated);
- ``verdict``: ``pass``, ``warn``, ``fail`` or ``error`` (:class:`Verdict`), the JSON's ``verdict``;
- ``exit_code``: what the command would exit with (README.md's exit codes);
- ``explain()``: the verdict line the terminal ends with, then what failed and why (the first divergence, the
  component, the server's file:line where the run traced it);
- ``to_json()``: the ``--json`` document (``kvdoctor schema <command>``; :data:`API_VERSION` is its schema version).

JUnit (``junit_path=``) and the GitHub step summary (``$GITHUB_STEP_SUMMARY``) are written as the command writes
them. Bad input raises the ``kvdoctor`` error classes (``kvdoctor.InputError`` and its siblings, each with its
``exit_code``) before anything starts; a run that started always returns its report (a deployment that failed: exit
code 3, ``verdict`` ``error``). No process exit, no terminal output (progress goes to ``on_event`` where a command
takes one), and nothing heavy at import: ``inspect`` without an engine never imports torch.

The CLI is a caller of this module: each command runs its job (``ConsistencyJob``, ``RoundtripJob``...) with its
head, progress bar and tables printed in between, and a test holds each function's keyword arguments equal to its
command's options (``tests/api/test_signatures.py``). docs/api.md lists the signatures.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # each name is imported when first asked for (the CLI imports only its command's module)
    from kvdoctor.api._consistency import ConsistencyJob, consistency
    from kvdoctor.api._drift import DriftJob, drift
    from kvdoctor.api._inspect import InspectJob, inspect
    from kvdoctor.api._job import ErrorCase, Job, execute
    from kvdoctor.api._pd_eval import PdEvalJob, pd_eval
    from kvdoctor.api._replay import ReplayJob, replay
    from kvdoctor.api._roundtrip import RoundtripJob, roundtrip
    from kvdoctor.api._sweep import SweepJob, SweepOptions, sweep
    from kvdoctor.report.envelope import SCHEMA_VERSION as API_VERSION
    from kvdoctor.report.envelope import Verdict
    from kvdoctor.report.reportable import Reportable as Result

_WHERE = {
    "consistency": "_consistency",
    "ConsistencyJob": "_consistency",
    "drift": "_drift",
    "DriftJob": "_drift",
    "inspect": "_inspect",
    "InspectJob": "_inspect",
    "ErrorCase": "_job",
    "Job": "_job",
    "execute": "_job",
    "pd_eval": "_pd_eval",
    "PdEvalJob": "_pd_eval",
    "replay": "_replay",
    "ReplayJob": "_replay",
    "roundtrip": "_roundtrip",
    "RoundtripJob": "_roundtrip",
    "sweep": "_sweep",
    "SweepJob": "_sweep",
    "SweepOptions": "_sweep",
}
_ELSEWHERE = {
    "API_VERSION": ("kvdoctor.report.envelope", "SCHEMA_VERSION"),
    "Verdict": ("kvdoctor.report.envelope", "Verdict"),
    "Result": ("kvdoctor.report.reportable", "Reportable"),
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(f"kvdoctor.api.{_WHERE[name]}"), name)
    if name in _ELSEWHERE:
        module, attribute = _ELSEWHERE[name]
        return getattr(import_module(module), attribute)
    raise AttributeError(f"module 'kvdoctor.api' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "API_VERSION",
    "ConsistencyJob",
    "DriftJob",
    "ErrorCase",
    "InspectJob",
    "Job",
    "PdEvalJob",
    "ReplayJob",
    "Result",
    "RoundtripJob",
    "SweepJob",
    "SweepOptions",
    "Verdict",
    "consistency",
    "drift",
    "execute",
    "inspect",
    "pd_eval",
    "replay",
    "roundtrip",
    "sweep",
]
