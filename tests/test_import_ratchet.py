"""A ratchet on kvdoctor's own function-level imports: their count outside the three lazy doors can only fall.

kvdoctor is lazy at three doors (``docs/design.md``, "Laziness at three doors"): the CLI's command table
(``cli/app.py``), the per-floor tables that name a server's or a scenario's module by string, and heavy third-party
packages (torch, SGLang, vLLM, httpx) inside ``engines/`` and ``deploy/``. Everywhere else a module says what it needs
at its head. An import of kvdoctor's own inside a function hides an arrow from a reader (and from the layering test's
graph of module heads), so their number is held here: it may fall (lower :data:`CEILING` to the new count, which
this test asks for), never rise.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import kvdoctor

PACKAGE = Path(kvdoctor.__file__).parent
ROOT = PACKAGE.parent

# The doors: modules whose lazy imports are their job.
DOORS = frozenset(
    {
        "kvdoctor/cli/app.py",  # the command table: a command's module is imported when the command runs
        "kvdoctor/core/servers.py",  # the per-floor server tables
        "kvdoctor/engines/__init__.py",
        # each server's engine adapter: its methods import the room's modules that import torch and the server at
        # their heads (the heavy third-party door, one per server)
        "kvdoctor/engines/sglang/__init__.py",
        "kvdoctor/engines/vllm/__init__.py",
        "kvdoctor/consistency/servers/__init__.py",
        "kvdoctor/consistency/scenarios/__init__.py",
        "kvdoctor/api/_servers.py",
        "kvdoctor/cli/render/__init__.py",
    }
)
CEILING = 88  # kvdoctor's own function-level imports outside DOORS (298 at the start of issue 40's work)


def _own(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return bool(node.level) or (node.module or "").split(".")[0] == "kvdoctor"
    if isinstance(node, ast.Import):
        return any(a.name.split(".")[0] == "kvdoctor" for a in node.names)
    return False


def function_level_imports(source: str) -> list[int]:
    """The line of each import of kvdoctor's own inside a function body of SOURCE (each statement once)."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            lines.update(sub.lineno for sub in ast.walk(node) if _own(sub))
    return sorted(lines)


def counts() -> Counter[str]:
    found: Counter[str] = Counter()
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name not in DOORS and (n := len(function_level_imports(path.read_text(encoding="utf-8")))):
            found[name] = n
    return found


def test_the_scanner_counts_imports_inside_functions_only() -> None:
    source = (
        "from kvdoctor import text\n"
        "import os\n"
        "def f():\n"
        "    from kvdoctor.core import faults\n"
        "    import json\n"
        "    def g():\n"
        "        from . import x\n"
        "    return faults\n"
        "class C:\n"
        "    def m(self):\n"
        "        import kvdoctor.report\n"
    )
    assert function_level_imports(source) == [4, 7, 11]


def test_function_level_imports_only_fall() -> None:
    found = counts()
    total = sum(found.values())
    worst = ", ".join(f"{name} {n}" for name, n in found.most_common(5))
    assert total <= CEILING, (
        f"{total} function-level imports of kvdoctor's own outside the doors (ceiling {CEILING}); import at the "
        f"module's head instead (most: {worst})"
    )
    assert total == CEILING, f"the count fell to {total}: lower CEILING in {Path(__file__).name} to {total}"
