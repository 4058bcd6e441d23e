"""The import-only sgl_kernel stand-in: importable, never callable, every call recorded; probes say no."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvdoctor.engines.sglang.cpu_shims import SHIM_DIR

PROBE = """
import torch, sgl_kernel
from sgl_kernel import copy_all_layer_kv_cache_cpu
from sgl_kernel.mamba import causal_conv1d_fn_cpu
assert not hasattr(torch.ops.sgl_kernel, "convert_weight_packed")  # AMX detection says no
assert not hasattr(torch.ops.sgl_kernel, "gptq_marlin_repack")  # register_fake_if_exists skips it
assert hasattr(torch.ops.sgl_kernel, "rmsnorm_cpu")  # looked up at import by some model modules
try:
    copy_all_layer_kv_cache_cpu(1, 2)
except sgl_kernel.StandInCalled as exc:
    print("raised:", exc)
else:
    raise SystemExit("a stand-in function returned")
try:
    torch.ops.sgl_kernel.rmsnorm_cpu()
except sgl_kernel.StandInCalled:
    print("op raised")
"""


def test_every_stand_in_call_raises_naming_itself_and_is_logged(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    env = {**os.environ, "PYTHONPATH": str(SHIM_DIR), "KVDOCTOR_STANDIN_LOG": str(log)}
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "sgl_kernel.copy_all_layer_kv_cache_cpu was called" in done.stdout and "op raised" in done.stdout
    names = [line.split(" ", 1)[1] for line in log.read_text().splitlines()]
    assert names == ["sgl_kernel.copy_all_layer_kv_cache_cpu", "torch.ops.sgl_kernel.rmsnorm_cpu"]


def test_an_import_alone_logs_nothing(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    env = {**os.environ, "PYTHONPATH": str(SHIM_DIR), "KVDOCTOR_STANDIN_LOG": str(log)}
    code = "import sgl_kernel; from sgl_kernel import anything; import sgl_kernel.mamba"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert not log.exists()


def _sglang_root() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    return Path(spec.origin).parent if spec and spec.origin else None


@pytest.mark.server
def test_placeholder_ops_are_what_sglang_looks_up_and_never_what_it_probes() -> None:
    """Against the installed SGLang (in .venv-server): a probed name answered would steer SGLang onto a
    kernel path the stand-in cannot run; a looked-up name missing would fail its import."""
    root = _sglang_root()
    if root is None:
        pytest.skip("sglang is not installed here")
    text = "\n".join(p.read_text(errors="replace") for p in root.rglob("*.py"))
    looked_up = set(re.findall(r"torch\.ops\.sgl_kernel\.(\w+)", text))
    probed = set(re.findall(r'hasattr\(torch\.ops\.sgl_kernel, *"(\w+)"', text)) | set(
        re.findall(r"sgl_kernel::(\w+)", text)
    )
    tree = ast.parse((SHIM_DIR / "sgl_kernel" / "__init__.py").read_text())
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "PLACEHOLDER_OPS")  # type: ignore[attr-defined]
    placeholders = ast.literal_eval(node.value.args[0])  # type: ignore[attr-defined]
    assert looked_up - probed == placeholders
