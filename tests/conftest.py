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
    ``-m server`` (``make test-server``, in .venv-server/), never as part of the main suite; likewise tests
    marked ``vllm_server`` (real vLLM servers) only under ``-m vllm_server`` (``make test-vllm-server``)."""
    markexpr = config.getoption("markexpr", "") or ""
    asked = {"server": "server" in markexpr.replace("vllm_server", ""), "vllm_server": "vllm_server" in markexpr}
    reasons = {
        "server": "launches real SGLang servers: run with -m server (make test-server)",
        "vllm_server": "launches real vLLM servers: run with -m vllm_server (make test-vllm-server)",
    }
    for marker, reason in reasons.items():
        if asked[marker]:
            continue
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)


@pytest.fixture
def server_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server environment's modules taken as present (``kvdoctor.core.environments.missing`` finds none missing):
    for tests whose servers are doubles, which would otherwise stop at the preflight that names the environment."""
    from kvdoctor.core import environments

    monkeypatch.setattr(environments, "missing", lambda modules: ())
