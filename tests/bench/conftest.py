"""Tests marked ``server`` launch real SGLang servers (minutes each): they run only when asked for with
``-m server`` (in .venv-server/), never as part of the main suite."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "server" in (config.getoption("markexpr", "") or ""):
        return
    skip = pytest.mark.skip(reason="launches real SGLang servers: run with -m server")
    for item in items:
        if "server" in item.keywords:
            item.add_marker(skip)
