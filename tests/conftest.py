"""Repo-wide test setup: without CUDA, Triton kernels run under the interpreter on CPU tensors.

``TRITON_INTERPRET`` is read when ``@triton.jit`` decorates a kernel, so it must be set before any
kernel module is imported; conftest.py is imported before every test module, which guarantees it.
Importing torch does not import triton, so probing CUDA here is safe.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``server`` launch real SGLang servers (minutes each): they run only when asked for with
    ``-m server`` (``make test-server``, in .venv-server/), never as part of the main suite."""
    if "server" in (config.getoption("markexpr", "") or ""):
        return
    skip = pytest.mark.skip(reason="launches real SGLang servers: run with -m server (make test-server)")
    for item in items:
        if "server" in item.keywords:
            item.add_marker(skip)
