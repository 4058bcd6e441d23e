"""A live server's fault, from its record to the hooks that do it (``Fault.impl`` of ``kvdoctor.core.faults``).

A :attr:`~kvdoctor.core.faults.Target.SERVER` record names the code that does it, ``"module:function"`` under
``kvdoctor.engines.<its server>``: the function takes the fault's name (the spelling ``--inject`` was given, an old
one included) and returns ``{server module: hook}``, each hook called with that module once it has been executed
(SGLang's site hook, :mod:`kvdoctor.engines.sglang.server_hooks`; vLLM's plugin,
:mod:`kvdoctor.engines.vllm.server_plugin`). No table keyed by a fault's name sits between the two: a new fault on
an existing path is its record and its function. Imported inside every server process at start-up, so it imports
only the module the record names, and only when asked.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

from kvdoctor.core.faults import Fault

__all__ = ["Hook", "hooks"]

Hook = Callable[[ModuleType], None]


def hooks(fault: Fault, name: str | None = None) -> dict[str, Hook]:
    """The server modules FAULT hooks, and how: its record's ``impl`` called with NAME (default: its own name).
    LookupError when the record names no implementation, ImportError/AttributeError when what it names is absent."""
    module, _, function = fault.impl.partition(":")
    if not module or not function:
        raise LookupError(f"fault {fault.name!r} ({fault.server}) names no implementation (Fault.impl)")
    impl: Callable[[str], dict[str, Hook]] = getattr(importlib.import_module(module), function)
    return impl(name or fault.name)
