"""kvdoctor's start-up hook for the SGLang servers it launches (this directory is put first on their
``PYTHONPATH``). It only registers import hooks; see ``kvdoctor.engines.sglang.server_hooks``."""

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
