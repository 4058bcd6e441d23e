"""Loading the CLI imports nothing heavy: every command's floor below it is imported inside the command.

Why it matters: ``inspect`` must start without torch, and the vLLM environment installs vLLM with
``--no-deps`` (no httpx, no psutil): a command module that imports pd-eval's HTTP client at load time
breaks ``kvdoctor inspect --server vllm`` there, though nothing it runs needs httpx.
"""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "triton", "pandas", "pyarrow", "httpx", "psutil", "prometheus_client", "sglang", "vllm")


def test_loading_the_cli_imports_no_heavy_module() -> None:
    code = (
        "import sys\n"
        "import kvdoctor.cli.app\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout
