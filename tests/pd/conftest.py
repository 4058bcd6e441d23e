"""The orphan check every process-starting pd test uses, and knob setting for the stand-ins."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import psutil
import pytest

from kvdoctor.pd.supervisor import marked_processes
from tests.pd.helpers import KNOB

TAG_ENV = "KVDOCTOR_TEST_TAG"


@pytest.fixture
def no_leftovers(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A tag inherited by everything the test starts; no tagged process may outlive the test."""
    tag = uuid.uuid4().hex
    monkeypatch.setenv(TAG_ENV, tag)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    yield tag
    ours = {psutil.Process().pid, *(p.pid for p in psutil.Process().parents())}
    left = [p for p in marked_processes(TAG_ENV, tag) if p.pid not in ours]
    for proc in left:  # clean up, so one failure does not poison the tests after it
        proc.kill()
    assert not left, f"processes left behind: {[p.pid for p in left]}"


@pytest.fixture
def knobs(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """``knobs(DECODE_CRASH_AFTER="5")`` sets stand-in behaviour for this test only."""

    def set_knobs(**values: str) -> None:
        for key, value in values.items():
            monkeypatch.setenv(KNOB + key, value)

    return set_knobs
