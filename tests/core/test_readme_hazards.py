"""The README's hazard tables list exactly the hazard codes kvdoctor emits, each with its severities.

The README is written by hand; the registry is the code: every ``Hazard(SEVERITY, "KVDnnn-...")`` in
kvdoctor (``core/sglang/hazards.py``, ``core/vllm/hazards.py``) and every hazard row built as a mapping with a
``severity`` and a ``code`` (the KVD015 / KVD115 drift hazards of the engine adapters), read from the
source so that a rule that never fires in a test is still counted. A code added to either side alone, or a
severity that changes on one side, fails here.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import kvdoctor
from kvdoctor.core.sglang.hazards import ERROR, INFO, WARNING

PACKAGE = Path(kvdoctor.__file__).parent
README = PACKAGE.parent / "README.md"
CODE = re.compile(r"KVD\d{3}-[A-Z0-9]+(?:-[A-Z0-9]+)*")
SEVERITIES = {"ERROR": ERROR, "WARNING": WARNING, "INFO": INFO}


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "text"`` assignments, and the severity names every module imports."""
    found = dict(SEVERITIES)
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
    """The (code -> severities) SOURCE emits, and every hazard code it names at all."""
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
            assert severity in SEVERITIES.values() and code and CODE.fullmatch(code), ast.unparse(node)[:200]
            emitted[code].add(severity)
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    named = {code for text in strings for code in CODE.findall(text)}
    return emitted, named


def registry() -> tuple[dict[str, set[str]], set[str]]:
    emitted: dict[str, set[str]] = defaultdict(set)
    named: set[str] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        codes, names = emitted_in(path.read_text(encoding="utf-8"))
        for code, severities in codes.items():
            emitted[code] |= severities
        named |= names
    return dict(emitted), named


def readme_table(text: str) -> dict[str, set[str]]:
    """Rows of the README's ``| code | severity | what goes wrong |`` tables: code -> severities."""
    rows: dict[str, set[str]] = {}
    in_table = False
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if cells[:2] == ["code", "severity"]:
            in_table = True
        elif not cells:
            in_table = False
        elif in_table and CODE.fullmatch(cells[0]):
            assert cells[0] not in rows, f"{cells[0]} listed twice"
            rows[cells[0]] = {s.strip() for s in cells[1].split("/")}
    return rows


def test_readme_lists_every_emitted_hazard_with_its_severities() -> None:
    emitted, named = registry()
    documented = readme_table(README.read_text(encoding="utf-8"))
    assert len(emitted) >= 20  # the extraction found the registry, not nothing
    assert documented == emitted
    assert named <= set(documented), f"codes named in kvdoctor but absent from the README: {named - set(documented)}"


def test_extraction_sees_a_new_rule_and_a_new_row() -> None:
    """A code added to the registry alone is found; so is a README row, and a severity per row."""
    source = (
        "from kvdoctor.core.sglang.hazards import ERROR, WARNING, Hazard\n"
        'DRIFT = "KVD777-NEW-DRIFT"\n'
        "def rule(ctx):\n"
        '    yield Hazard(ERROR, "KVD999-NEW-RULE", "m")\n'
        '    yield Hazard(severity=WARNING, code="KVD999-NEW-RULE", message="m")\n'
        'rows = [{"severity": "info", "code": DRIFT, "message": "m"}]\n'
    )
    emitted, named = emitted_in(source)
    assert emitted == {"KVD999-NEW-RULE": {"error", "warning"}, "KVD777-NEW-DRIFT": {"info"}}
    assert named == {"KVD999-NEW-RULE", "KVD777-NEW-DRIFT"}
    table = (
        "| code | severity | what goes wrong |\n|---|---|---|\n| KVD999-NEW-RULE | error / warning | x |\n\nKVD001-X"
    )
    assert readme_table(table) == {"KVD999-NEW-RULE": {"error", "warning"}}
