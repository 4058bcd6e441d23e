"""The ``sglang`` cases skip where SGLang is not importable: the engine suite's own gate, reused."""

from tests.engines.sglang.conftest import pytest_collection_modifyitems  # noqa: F401
