"""A reproduction bundle's CPU enabler (stand-alone: no kvdoctor). Put this directory first on a SGLang server's
``PYTHONPATH`` with ``REPRO_PATCHES=mooncake-host-indices``: once SGLang has executed
``sglang.srt.disaggregation.mooncake.conn``, ``MooncakeKVSender.supports_host_tensor_indices`` is set to False, so
prefill's first send takes the plain ``kv_to_page_indices`` branch instead of pinning host memory and recording a
CUDA event (``srt/disaggregation/prefill.py:1746-1761``), which fails on a CPU-only machine. It changes SGLang's
behaviour on a CPU only; on a GPU no bundle needs it. Then the ``sitecustomize`` this one shadows runs, as Python
would have run it.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_MODULE = "sglang.srt.disaggregation.mooncake.conn"


class _AfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: object = None, target: object = None) -> object:
        if fullname != _MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: object) -> None:
            original(module)
            module.MooncakeKVSender.supports_host_tensor_indices = False
            print("repro enabler: MooncakeKVSender.supports_host_tensor_indices = False", file=sys.stderr)

        loader.exec_module = exec_module
        return spec


if "mooncake-host-indices" in os.environ.get("REPRO_PATCHES", "").split(","):
    sys.meta_path.insert(0, _AfterImport())


def _chain() -> None:
    here = os.path.dirname(os.path.realpath(__file__))
    rest = [e for e in sys.path if os.path.realpath(e or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_chain()
