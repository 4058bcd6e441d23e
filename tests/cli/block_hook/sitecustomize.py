"""Test-only start-up hook (on PYTHONPATH in tests/cli/test_signals.py, never in the package).

``KVDOCTOR_TEST_BLOCK_AT=module:function`` wraps that function when its module is imported: the
wrapper prints ``kvdoctor-test: blocked at module:function`` on stderr, then waits for a signal
forever. A test reads that line, so it signals a run that is provably under way at a known point
(not after a guessed sleep).
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import os
import signal
import sys
from typing import Any

MARK = "kvdoctor-test: blocked at"


def _blocking(where: str, func: Any) -> Any:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        sys.stderr.write(f"{MARK} {where}\n")  # one write: the line is whole once a reader sees its end
        sys.stderr.flush()
        while True:
            signal.pause()

    return wrapper


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, module: str, function: str) -> None:
        self.module, self.function = module, function

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != self.module:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def patched(module: Any) -> None:
            exec_module(module)
            setattr(module, self.function, _blocking(f"{self.module}:{self.function}", getattr(module, self.function)))

        spec.loader.exec_module = patched  # type: ignore[method-assign]
        return spec


_AT = os.environ.get("KVDOCTOR_TEST_BLOCK_AT", "")
if ":" in _AT:
    sys.meta_path.insert(0, _Finder(*_AT.split(":", 1)))
