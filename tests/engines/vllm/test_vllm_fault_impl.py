"""Every live vLLM fault's implementation (``Fault.impl``), imported and called with each spelling ``--inject``
takes, as kvdoctor's plugin calls it (``server_plugin.fault_hooks``): it returns hooks, each for a module the
installed vLLM has. Nothing is installed: the hooks run only when a server imports their module
(``tests/core/test_fault_impl.py`` reads the same records without vLLM)."""

from __future__ import annotations

import importlib.util

import pytest

from kvdoctor.core import faults
from kvdoctor.core.faults import Fault, Target
from kvdoctor.engines import fault_impl
from kvdoctor.engines.vllm import server_plugin

pytestmark = pytest.mark.vllm

LIVE = faults.select(server="vllm", target=Target.SERVER)


@pytest.mark.parametrize("fault", LIVE, ids=lambda f: f.name)
def test_each_impl_returns_hooks_on_modules_of_the_installed_vllm(fault: Fault) -> None:
    for name in (fault.name, *fault.formerly):
        found = fault_impl.hooks(fault, name)
        assert found, f"{fault.impl}({name!r}) hooks nothing"
        for module, hook in found.items():
            assert callable(hook), (name, module)
            assert module.startswith("vllm.") and importlib.util.find_spec(module) is not None, (
                f"{name}: {module} is not in the installed vLLM"
            )
        assert set(server_plugin.fault_hooks(name)) == set(found), "the plugin installs what the record names"
