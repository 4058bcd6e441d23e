"""Every live SGLang fault's implementation (``Fault.impl``), imported and called with the fault's name as the site
hook calls it (``server_hooks.fault_hooks``): it returns hooks, each for a module the installed SGLang has. Nothing is
installed: the hooks run only when a server imports their module (``tests/core/test_fault_impl.py`` reads the same
records without SGLang)."""

from __future__ import annotations

import importlib.util

import pytest

from kvdoctor.core import faults
from kvdoctor.core.faults import Fault, Target
from kvdoctor.engines import fault_impl
from kvdoctor.engines.sglang import server_hooks

pytestmark = pytest.mark.sglang

LIVE = faults.select(server="sglang", target=Target.SERVER)


@pytest.mark.parametrize("fault", LIVE, ids=lambda f: f.name)
def test_each_impl_returns_hooks_on_modules_of_the_installed_sglang(fault: Fault) -> None:
    found = fault_impl.hooks(fault)
    assert found, f"{fault.impl}({fault.name!r}) hooks nothing"
    for module, hook in found.items():
        assert callable(hook), (fault.name, module)
        assert module.startswith("sglang.") and importlib.util.find_spec(module) is not None, (
            f"{fault.name}: {module} is not in the installed SGLang"
        )
    assert set(server_hooks.fault_hooks(fault.name)) == set(found), "the site hook installs what the record names"
