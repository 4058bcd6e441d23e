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
    """Parse STDOUT (one JSON object) and assert it validates against KIND's shipped schema and that the schema
    declares every key it holds (``undeclared``)."""
    document = json.loads(stdout) if isinstance(stdout, str) else stdout
    problems = errors(document, kind)
    assert not problems, "\n".join(problems[:20])
    extra = undeclared(document, kind)
    assert not extra, f"keys the {kind} schema does not declare: {extra[:20]}"
    return document


def undeclared(document: dict[str, Any], kind: ReportKind | str) -> list[str]:
    """Every key DOCUMENT holds that KIND's schema does not declare where it sits, as a '/'-path.

    The shipped schemas stay open (consumers must accept additive keys), so validation alone lets a new key in
    without a word in the contract; this walks the document beside the schema: ``$ref`` resolved, ``allOf`` and
    a passing ``if``'s ``then`` (else ``else``) merged, of ``oneOf``/``anyOf`` only the branches the value
    validates against; a key is declared when one of those names it in ``properties`` or ``required``, matches a
    ``patternProperties`` pattern, or sits under an ``additionalProperties`` schema. An object no schema gives
    properties to is free-form by the schema's own word (a map, a plan as it was run): its keys are not checked."""
    import re

    root = schema(ReportKind(kind))
    check = validator(kind)

    def target(ref: str) -> dict[str, Any]:
        assert ref.startswith("#/"), ref
        node: Any = root
        for part in ref[2:].split("/"):
            node = node[part]
        return node

    def passes(sub: dict[str, Any], value: Any) -> bool:
        return check.evolve(schema={"$defs": root.get("$defs", {}), **sub}).is_valid(value)

    def applicable(node: dict[str, Any], value: Any) -> list[dict[str, Any]]:
        out = [node]
        if "$ref" in node:  # beside its siblings, as 2020-12 reads it
            out += applicable(target(node["$ref"]), value)
        for sub in node.get("allOf", ()):
            out += applicable(sub, value)
        for key in ("oneOf", "anyOf"):
            for sub in node.get(key, ()):
                if passes(sub, value):
                    out += applicable(sub, value)
        if "if" in node:
            branch = "then" if passes(node["if"], value) else "else"
            if branch in node:
                out += applicable(node[branch], value)
        return out

    found: list[str] = []

    def walk(schemas: list[dict[str, Any]], value: Any, path: str) -> None:
        nodes = [n for node in schemas for n in applicable(node, value)]  # every schema that speaks for VALUE here
        if isinstance(value, dict) and any("properties" in n or "patternProperties" in n for n in nodes):
            for key, item in value.items():
                subs = [n["properties"][key] for n in nodes if key in n.get("properties", {})]
                subs += [s for n in nodes for p, s in n.get("patternProperties", {}).items() if re.search(p, key)]
                subs += [n["additionalProperties"] for n in nodes if isinstance(n.get("additionalProperties"), dict)]
                named = any(key in n.get("required", ()) for n in nodes)  # required names it (untyped)
                if not subs and not named and not any(n.get("additionalProperties") is True for n in nodes):
                    found.append(f"{path}/{key}")
                walk(subs, item, f"{path}/{key}")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                subs = [n["items"] for n in nodes if isinstance(n.get("items"), dict)]
                subs += [n["prefixItems"][i] for n in nodes if i < len(n.get("prefixItems", ()))]
                walk(subs, item, f"{path}/{i}")

    walk([root], document, "")
    return sorted(set(found))
