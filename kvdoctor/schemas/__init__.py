"""The published JSON Schemas of kvdoctor's ``--json`` reports, one per command.

Each command's schema ships as ``<command>.json`` beside ``header.json`` (the keys every report
opens with, see ``kvdoctor.report.envelope``); :func:`schema` composes the two into one
self-contained JSON Schema (draft 2020-12), which is what ``kvdoctor schema <command>`` prints and
what the tests validate every command's real output against. Reading them needs only the stdlib.
"""

from __future__ import annotations

import json
from enum import Enum
from importlib import resources
from typing import Any

from kvdoctor.report.envelope import SCHEMA_VERSION

DIALECT = "https://json-schema.org/draft/2020-12/schema"

__all__ = ["DIALECT", "SPACE", "ReportKind", "SchemaName", "schema", "space_schema"]


class ReportKind(str, Enum):
    """The commands whose ``--json`` report has a published schema."""

    INSPECT = "inspect"
    ROUNDTRIP = "roundtrip"
    PD_EVAL = "pd-eval"
    DRIFT = "drift"
    CONSISTENCY = "consistency"
    FAULTS = "faults"
    REPLAY = "replay"
    SWEEP = "sweep"


SPACE = "sweep-space"  # a sweep's --space TOML file, read as this document: no report, no header


# What ``kvdoctor schema`` prints: each command's ``--json`` report (every ReportKind), and the sweep's space file.
SchemaName = Enum("SchemaName", {**{k.name: k.value for k in ReportKind}, "SWEEP_SPACE": SPACE}, type=str)


def space_schema() -> dict[str, Any]:
    """The schema of a sweep's ``--space`` file (TOML, read as the document it holds)."""
    return _load(f"{SPACE}.json")


def _load(name: str) -> dict[str, Any]:
    return json.loads(resources.files(__package__).joinpath(name).read_text(encoding="utf-8"))


# A report that carries another command's body: pd-eval --oracle tokens holds consistency's under ``tokens``.
EMBEDS: dict[ReportKind, tuple[ReportKind, ...]] = {ReportKind.PD_EVAL: (ReportKind.CONSISTENCY,)}


def _embedded(kind: ReportKind) -> dict[str, Any]:
    """KIND's body as ``$defs`` entries of another schema: the body under ``<kind>``, its own ``$defs`` (and every
    reference to them) renamed ``<kind>-<name>`` so they cannot collide with the host's."""
    prefix = f"{kind.value}-"
    body = json.loads(json.dumps(_load(f"{kind.value}.json")).replace('"#/$defs/', f'"#/$defs/{prefix}'))
    defs = {prefix + name: value for name, value in body.pop("$defs", {}).items()}
    core = {k: v for k, v in body.items() if k not in ("$schema", "$id", "title", "$comment", "allOf")}
    return {kind.value: core, **defs}


def schema(kind: ReportKind) -> dict[str, Any]:
    """KIND's full schema: its own keys (``<kind>.json``) and the shared header, as one document.

    KIND may be given as its value (``"pd-eval"``): an unknown one raises ValueError, never a KeyError or
    a missing file deep in importlib.resources."""
    kind = ReportKind(kind)
    body = _load(f"{kind.value}.json")
    head = _load("header.json")
    head.pop("$comment", None)
    defs = {**body.pop("$defs", {}), "header": head}
    for inner in EMBEDS.get(kind, ()):
        defs |= _embedded(inner)
    rest = {k: v for k, v in body.items() if k not in ("$schema", "$id", "title", "allOf")}
    return {
        "$schema": DIALECT,
        "$id": f"urn:kvdoctor:schema:{kind.value}:{SCHEMA_VERSION}",
        "title": body.get("title", f"kvdoctor {kind.value} --json"),
        **rest,
        "allOf": [
            {"$ref": "#/$defs/header"},
            {"properties": {"command": {"const": kind.value}}},
            *body.get("allOf", []),
        ],
        "$defs": defs,
    }
