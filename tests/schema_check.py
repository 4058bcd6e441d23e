"""Validate a command's real ``--json`` output against the schema kvdoctor ships (jsonschema, draft 2020-12)."""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker

from kvdoctor.schemas import ReportKind, schema


def validator(kind: ReportKind | str) -> Draft202012Validator:
    document = schema(ReportKind(kind))
    Draft202012Validator.check_schema(document)
    return Draft202012Validator(document, format_checker=FormatChecker())


def errors(document: dict[str, Any], kind: ReportKind | str) -> list[str]:
    """Every violation, as 'path: message' lines (empty when DOCUMENT is valid)."""
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in validator(kind).iter_errors(document)
    ]


def assert_valid(stdout: str | dict[str, Any], kind: ReportKind | str) -> dict[str, Any]:
    """Parse STDOUT (one JSON object) and assert it validates against KIND's shipped schema."""
    document = json.loads(stdout) if isinstance(stdout, str) else stdout
    problems = errors(document, kind)
    assert not problems, "\n".join(problems[:20])
    return document
