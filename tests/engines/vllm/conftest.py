"""The vLLM suite runs vLLM's own code; it needs .venv-vllm/ (``make test-vllm``)."""

from __future__ import annotations

import importlib.util
import os

import pytest

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="vLLM is not installed here (make vllm-env; make test-vllm)")
    for item in items:
        if "vllm" in item.keywords and not HAVE_VLLM:
            item.add_marker(skip)
