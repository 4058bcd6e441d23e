"""``kvdoctor schema``: print the published JSON Schema of a command's ``--json`` report."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from kvdoctor.schemas import SPACE, ReportKind, SchemaName, space_schema
from kvdoctor.schemas import schema as load


def schema(
    kind: Annotated[
        SchemaName,
        typer.Argument(help="The command whose --json report the schema describes, or sweep-space (--space FILE)."),
    ],
) -> None:
    """Print the JSON Schema (draft 2020-12) that COMMAND's --json output validates against.

    The header keys (schema_version, kvdoctor_version, rules_revision, engine, timestamp,
    command_line, verdict, exit_code, warnings) are the same in every command; see
    docs/output-contract.md for what may change between versions.
    """
    document = space_schema() if kind.value == SPACE else load(ReportKind(kind.value))
    typer.echo(json.dumps(document, indent=2))
