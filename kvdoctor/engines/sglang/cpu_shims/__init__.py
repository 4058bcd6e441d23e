"""Import-only stand-ins for CUDA-only packages, put on a *server process's* ``PYTHONPATH`` by kvdoctor.

Only ``sgl_kernel`` today: SGLang 0.5.23 imports it unconditionally on its CPU path
(``sglang/kernels/ops/kvcache/cache_move.py:9-10``), but the registry only has CUDA wheels. The stand-in
lets SGLang's own CPU code import; any call of it raises and is logged (see ``sgl_kernel/__init__.py``).
kvdoctor adds this directory only when the real package is absent and the device is CPU, and names it
in the report's ``cpu_enablers``.
"""

from __future__ import annotations

from pathlib import Path

SHIM_DIR = Path(__file__).resolve().parent
STANDIN_LOG_ENV = "KVDOCTOR_STANDIN_LOG"
