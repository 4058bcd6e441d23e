"""The engine suite runs SGLang's own code; it needs .venv-sglang/ (``make test-sglang``)."""

from __future__ import annotations

import importlib.util

import pytest

HAVE_SGLANG = importlib.util.find_spec("sglang") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="SGLang is not installed here (make sglang-env; make test-sglang)")
    for item in items:
        if item.get_closest_marker("sglang") is not None and not HAVE_SGLANG:  # a marker, not tests/core/sglang/'s name
            item.add_marker(skip)
