"""kvdoctor's start-up hook for the SGLang servers it launches (this directory is put first on their
``PYTHONPATH``). It only registers import hooks; see ``kvdoctor.engines.sglang.server_hooks``.

Python imports one ``sitecustomize`` (``site.execsitecustomize``), the first on ``sys.path``: being first, this
one shadows the user's own (in a ``PYTHONPATH`` entry, the venv's site-packages, ...), which a single server
without this directory runs. So after installing the hooks it runs the next ``sitecustomize`` on ``sys.path``
after this directory, as Python would have, and both topologies run the same user code. An exception in the
user's file propagates as it would without kvdoctor (``site`` prints "Error in sitecustomize"); kvdoctor's
hooks are installed by then.
"""

try:
    from kvdoctor.engines.sglang import server_hooks as _kvdoctor_server_hooks

    _kvdoctor_server_hooks.install()
except Exception as _exc:  # never silent: the run reads this file back and fails on it
    import os as _os
    import sys as _sys

    print(f"kvdoctor site hook failed: {type(_exc).__name__}: {_exc}", file=_sys.stderr)
    _path = _os.environ.get("KVDOCTOR_HOOK_LOG")
    if _path:
        with open(_path, "a", encoding="utf-8") as _fh:
            _fh.write(f"{_os.getpid()} hook-failed {type(_exc).__name__}: {_exc}\n")


def _kvdoctor_chain() -> None:
    """Run the ``sitecustomize`` this one shadows, as the module ``sitecustomize`` (what ``import`` would give)."""
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.realpath(__file__))

    def ours(entry: str) -> bool:
        return os.path.realpath(entry or os.curdir) == here

    mine = [i for i, entry in enumerate(sys.path) if ours(entry)]
    rest = [entry for entry in sys.path[mine[0] + 1 if mine else 0 :] if not ours(entry)]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_kvdoctor_chain()
