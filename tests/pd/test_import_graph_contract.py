"""The pd modules import each other without a cycle, lazy imports included.

A cycle hidden by a function-level import works until someone moves the import to the top (or imports
the other module first) and gets a half-initialised module. The graph is read with ``ast`` from every
``import`` in kvdoctor/pd/*.py, at any depth (function bodies and ``TYPE_CHECKING`` blocks too), so a
cycle cannot hide; and each module is imported alone in a fresh interpreter, so none depends on
another having been imported first.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

import kvdoctor.pd

PD = Path(kvdoctor.pd.__file__).parent
MODULES = sorted(f"kvdoctor.pd.{p.stem}" for p in PD.glob("*.py") if p.stem != "__init__")


def pd_imports(path: Path) -> set[str]:
    """Every kvdoctor.pd module PATH imports, wherever the import statement sits."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}  # from kvdoctor.pd import run
    return {name for name in found if name in MODULES}


def graph() -> dict[str, set[str]]:
    return {f"kvdoctor.pd.{p.stem}": pd_imports(p) for p in PD.glob("*.py") if p.stem != "__init__"}


def test_the_graph_sees_function_level_imports() -> None:
    # The reader itself: publish imports render and reporting; the CLI-facing modules are found.
    deps = graph()
    assert {"kvdoctor.pd.render", "kvdoctor.pd.reporting"} <= deps["kvdoctor.pd.publish"]
    assert "kvdoctor.pd.run" in deps["kvdoctor.pd.render"]


def test_no_import_cycle_among_pd_modules() -> None:
    try:
        order = list(TopologicalSorter(graph()).static_order())
    except CycleError as exc:
        pytest.fail(f"import cycle among kvdoctor.pd modules: {' -> '.join(exc.args[1])}")
    assert set(order) == set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_each_pd_module_imports_alone_in_a_fresh_interpreter(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
