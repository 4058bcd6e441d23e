"""Helpers for the core tests: write configs to disk and analyse them under flags."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kvdoctor.core.config import load_config, parse_config
from kvdoctor.core.sglang.analysis import Analysis, analyze, analyze_config
from kvdoctor.core.sglang.flags import parse_flags
from kvdoctor.core.sglang.policy import DEFAULT_PLATFORM, Platform

# A Hopper GPU: no backend default there moves the page size, so a launch keeps page 1.
HOPPER = Platform(gpu_arch="sm90")


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[[dict[str, Any]], Path]:
    def write(config: dict[str, Any], name: str = "config.json") -> Path:
        path = tmp_path / name
        path.write_text(json.dumps(config), encoding="utf-8")
        return path

    return write


def fixture_with(name: str, *flags: str, **changes: Any) -> Analysis:
    """A bundled fixture with some text-config fields changed, analysed under FLAGS."""
    base = load_config(name)
    top = dict(base.top)
    if "text_config" in top:
        top["text_config"] = {**top["text_config"], **changes}
    else:
        top.update(changes)
    return analyze_config(parse_config(json.dumps(top), f"{name}+changes"), parse_flags(list(flags)))


def run(model: str, *flags: str, platform: Platform = DEFAULT_PLATFORM) -> Analysis:
    return analyze(model, list(flags), platform=platform)
