"""The hazard tables of the docs are the hazard registry (``kvdoctor.core.registry``), row for row.

The registry is the one source: each hazard code is one ``Rule`` record (server, severities, the line
the table shows, citations), registered by ``core/sglang/hazards.py`` (KVD0xx) and ``core/vllm/hazards.py``
(KVD1xx). The table is written by hand, so it is held to the registry: the same codes, the same
severities in the same order, the same words. The code is held to the registry too: every hazard
kvdoctor builds without a ``Rule`` (``Hazard(SEVERITY, "KVDnnn-...")``, or a mapping with a ``severity``
and a ``code``: the KVD015 / KVD115 drift rows of the engine adapters) is read from the source, so a
code emitted but never registered, or with a severity its record does not have, fails here even when no
test makes it fire.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

import kvdoctor
import kvdoctor.core.sglang.hazards
import kvdoctor.core.vllm.hazards  # both servers register their rules on import
from kvdoctor._exceptions import InternalError
from kvdoctor.core import registry
from kvdoctor.core.registry import ERROR, INFO, WARNING, Rule, Severity

PACKAGE = Path(kvdoctor.__file__).parent
README = PACKAGE.parent / "docs" / "inspect.md"  # the hazard tables live in the inspect reference
REGISTRY = Path(registry.__file__)
CODE = re.compile(r"KVD\d{3}-[A-Z0-9]+(?:-[A-Z0-9]+)*")
SEVERITIES = {"ERROR": ERROR, "WARNING": WARNING, "INFO": INFO}


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "text"`` assignments, and the severity names every module imports."""
    found: dict[str, str] = {name: severity.value for name, severity in SEVERITIES.items()}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            found.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
    return found


def _text(node: ast.AST | None, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def emitted_in(source: str) -> tuple[dict[str, set[str]], set[str]]:
    """The (code -> severities) SOURCE builds as bare hazards, and every hazard code it names at all."""
    tree = ast.parse(source)
    constants = _constants(tree)
    emitted: dict[str, set[str]] = defaultdict(set)
    for node in ast.walk(tree):
        pair: tuple[ast.AST | None, ast.AST | None] | None = None
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Hazard":
            args = {
                **dict(zip(("severity", "code"), node.args, strict=False)),
                **{k.arg: k.value for k in node.keywords},
            }
            pair = (args.get("severity"), args.get("code"))
        elif isinstance(node, ast.Dict):
            keys = {_text(k, {}): v for k, v in zip(node.keys, node.values, strict=True) if k is not None}
            if "severity" in keys and "code" in keys:
                pair = (keys["severity"], keys["code"])
        if pair is not None:
            severity, code = _text(pair[0], constants), _text(pair[1], constants)
            assert severity in {s.value for s in Severity} and code and CODE.fullmatch(code), ast.unparse(node)[:200]
            emitted[code].add(severity)
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    named = {code for text in strings for code in CODE.findall(text)}
    return emitted, named


def in_source() -> tuple[dict[str, set[str]], set[str]]:
    emitted: dict[str, set[str]] = defaultdict(set)
    named: set[str] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == REGISTRY:
            continue  # builds each registered rule's hazard from its record (Rule.hazard)
        codes, names = emitted_in(path.read_text(encoding="utf-8"))
        for code, severities in codes.items():
            emitted[code] |= severities
        named |= names
    return dict(emitted), named


def readme_table(text: str) -> dict[str, tuple[str, str]]:
    """Rows of the docs' ``| code | severity | what goes wrong |`` tables: code -> (severity cell, text)."""
    rows: dict[str, tuple[str, str]] = {}
    in_table = False
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if cells[:2] == ["code", "severity"]:
            in_table = True
        elif not cells:
            in_table = False
        elif in_table and CODE.fullmatch(cells[0]):
            assert cells[0] not in rows, f"{cells[0]} listed twice"
            rows[cells[0]] = (cells[1], " | ".join(cells[2:]))
    return rows


def registered_rows() -> dict[str, tuple[str, str]]:
    return {code: (" / ".join(rule.severities), rule.doc) for code, rule in registry.RULES.items()}


def test_the_docs_table_is_the_registry() -> None:
    documented = readme_table(README.read_text(encoding="utf-8"))
    assert len(registry.RULES) >= 20  # both servers registered, not nothing
    assert documented == registered_rows()


def test_every_code_kvdoctor_builds_or_names_is_registered_with_its_severities() -> None:
    emitted, named = in_source()
    assert {"KVD015-RULES-DRIFT", "KVD115-VLLM-DRIFT"} <= set(emitted)  # the extraction found the adapters' rows
    for code, severities in emitted.items():
        assert code in registry.RULES, f"{code} is emitted but not registered"
        assert severities <= set(registry.RULES[code].severities), code
    assert named <= set(registry.RULES), f"codes named in kvdoctor but not registered: {named - set(registry.RULES)}"


def test_each_server_registers_its_own_codes() -> None:
    sglang, vllm = registry.rules_for("sglang"), registry.rules_for("vllm")
    assert sglang and all(r.code.startswith("KVD0") for r in sglang)
    assert vllm and all(r.code.startswith("KVD1") for r in vllm)
    assert {r.code for r in sglang} | {r.code for r in vllm} == set(registry.RULES)


def test_a_rule_cites_only_its_own_servers_recorded_source() -> None:
    from kvdoctor.core.sglang import rules as sglang_rules
    from kvdoctor.core.vllm import rules as vllm_rules

    recorded = {"sglang": set(sglang_rules.CITATIONS), "vllm": set(vllm_rules.CITATIONS)}
    for rule in registry.RULES.values():
        assert set(rule.cites) <= recorded[rule.server], rule.code


def test_a_hazard_is_held_to_its_rules_severities() -> None:
    one = Rule("sglang", "KVD999-X", (ERROR,), "x")
    two = Rule("vllm", "KVD998-Y", (INFO, WARNING), "y")
    assert one.hazard("m", "w") == registry.Hazard(ERROR, "KVD999-X", "m", "w")
    assert two.hazard("m", severity=WARNING).severity is WARNING
    with pytest.raises(InternalError, match="not registered with severity"):
        one.hazard("m", severity=WARNING)
    with pytest.raises(InternalError, match="several severities"):
        two.hazard("m")


def test_registering_a_code_twice_or_an_unknown_server_is_refused() -> None:
    with pytest.raises(InternalError, match="registered twice"):
        registry.register("sglang", (), ())
    with pytest.raises(InternalError, match="KVD001-SSM-ON-HOST-POOL"):
        registry.register("other", (Rule("other", "KVD001-SSM-ON-HOST-POOL", (ERROR,), "x"),), ())
    assert "other" not in {r.server for r in registry.RULES.values()}
    with pytest.raises(InternalError, match="no hazard rules registered for 'trtllm'"):
        registry.checks_for("trtllm")  # never an empty list: a clean launch from checks that did not run


def test_severity_prints_and_compares_as_its_string() -> None:
    import json

    assert ERROR == "error" and hash(WARNING) == hash("warning") and {"info": 1}[INFO] == 1
    assert f"{ERROR}" == str(ERROR) == "error" and f"{INFO:>6}" == "  info"
    assert json.dumps({"severity": WARNING}) == '{"severity": "warning"}'


def test_extraction_sees_a_new_rule_and_a_new_row() -> None:
    """A bare hazard's code is found with its severities; so is a docs row, with its severity cell and text."""
    source = (
        "from kvdoctor.core.registry import ERROR, WARNING, Hazard\n"
        'DRIFT = "KVD777-NEW-DRIFT"\n'
        "def rule(ctx):\n"
        '    yield Hazard(ERROR, "KVD999-NEW-RULE", "m")\n'
        '    yield Hazard(severity=WARNING, code="KVD999-NEW-RULE", message="m")\n'
        'rows = [{"severity": "info", "code": DRIFT, "message": "m"}]\n'
    )
    emitted, named = emitted_in(source)
    assert emitted == {"KVD999-NEW-RULE": {"error", "warning"}, "KVD777-NEW-DRIFT": {"info"}}
    assert named == {"KVD999-NEW-RULE", "KVD777-NEW-DRIFT"}
    table = "| code | severity | what goes wrong |\n|---|---|---|\n| KVD999-NEW-RULE | error / warning | x `y` |\n\nX"
    assert readme_table(table) == {"KVD999-NEW-RULE": ("error / warning", "x `y`")}
