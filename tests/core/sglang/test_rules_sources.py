"""Every constant of the SGLang rules package (``kvdoctor/core/sglang/rules/``) is public and read somewhere.

A ``*_SOURCE`` citation nothing reads is a rule kvdoctor claims to restate but never shows or uses: it
must be attached to the datum it cites, carried by the hazard or condition that reports it, or named
where the rule is applied. A reference is the name as a word anywhere in ``kvdoctor/`` other than the
statement that defines it and the package's ``__init__`` (which lists every name once): another module
reading ``rules.NAME``, a table of the package built from it, or the comment at the use site that points
at it. The package's ``__all__`` is its public API: every public name of every module, each once.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import kvdoctor
from kvdoctor.core.cite import Cite, located, shown
from kvdoctor.core.sglang import rules

PACKAGE = Path(kvdoctor.__file__).parent
RULES = Path(rules.__file__).parent
INIT = RULES / "__init__.py"
MODULES = sorted(p for p in RULES.glob("*.py") if p != INIT)


def _definitions(tree: ast.Module) -> dict[str, tuple[int, int]]:
    """Module-level names assigned in a module, each with the lines of its defining statement."""
    found: dict[str, tuple[int, int]] = {}
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        for target in targets:
            if isinstance(target, ast.Name):
                found[target.id] = (node.lineno, node.end_lineno or node.lineno)
    return found


def _public(tree: ast.Module) -> set[str]:
    names = set(_definitions(tree))
    names |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    return {n for n in names if not n.startswith("_") and n != "cite"}


def unreferenced(rules_text: str, others: list[str]) -> list[str]:
    """Public constants and ``*_SOURCE`` citations of RULES_TEXT that nothing outside their definitions names."""
    lines = rules_text.splitlines()
    missing = []
    for name, (start, end) in _definitions(ast.parse(rules_text)).items():
        if name.startswith("_") and not name.endswith("_SOURCE"):
            continue
        word = re.compile(rf"\b{re.escape(name)}\b")
        outside = "\n".join(lines[: start - 1] + lines[end:])
        if not word.search(outside) and not any(word.search(text) for text in others):
            missing.append(name)
    return missing


def test_every_rules_constant_is_referenced_in_kvdoctor() -> None:
    for module in MODULES:
        others = [
            p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py") if p.resolve() not in {module.resolve(), INIT}
        ]
        assert unreferenced(module.read_text(encoding="utf-8"), others) == [], module.name


def test_the_check_finds_an_unread_citation() -> None:
    """The check itself: a citation named only by its definition is reported, one read by a table is not."""
    text = (
        'A_SOURCE = cite("x.py", "a", 1)\n'
        'B_SOURCE = cite("x.py", "b", 2)\n'
        "TABLE = {'b': B_SOURCE}\n"
        'MULTI_SOURCE = (\n    cite("x.py", "m", 3),\n)\n'
        "_PRIVATE = 1\n"
    )
    assert unreferenced(text, ["print(rules.TABLE)"]) == ["A_SOURCE", "MULTI_SOURCE"]
    assert unreferenced(text, ["rules.TABLE", "rules.A_SOURCE", "x = MULTI_SOURCE"]) == []


def test_all_is_every_public_name_of_every_module_once() -> None:
    """``rules.X`` works for every public X of the package's modules, and ``__all__`` names nothing else."""
    public: list[str] = []
    for module in [*MODULES]:
        public += sorted(_public(ast.parse(module.read_text(encoding="utf-8"))))
    assert len(public) == len(set(public)), "a name is defined in two modules of the package"
    assert sorted(rules.__all__) == sorted(public)
    assert all(getattr(rules, name) is not None for name in rules.__all__)
    assert rules.RULES_REVISION.startswith("sglang==0.5.23")


def test_every_citation_is_a_literal_cite_call_recorded_once() -> None:
    """The engine suite parses the package's cite(...) calls; each must be a literal call CITATIONS holds."""
    calls = [
        node
        for module in MODULES
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "cite"
    ]
    assert len(calls) == len(rules.CITATIONS) > 100
    assert all(all(isinstance(a, ast.Constant) for a in call.args) for call in calls)
    assert {c.server for c in rules.CITATIONS} == {"sglang"}


def test_located_and_shown_join_each_citation() -> None:
    one = Cite("sglang", "srt/a.py", "a", 3, 5)
    two = Cite("sglang", "srt/b.py", "b", 7, 7)
    assert located(one) == "sglang/srt/a.py:3-5"
    assert located((one, two)) == "sglang/srt/a.py:3-5; sglang/srt/b.py:7"
    assert shown((one, two)) == "srt/a.py:3-5 (a); srt/b.py:7 (b)"  # a model's rule source, as inspect prints it
    assert str(Cite("vllm", "config/vllm.py", "f", 10, 12)) == "vllm/config/vllm.py:10-12 (f)"
