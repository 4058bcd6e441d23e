"""The orphan check every process-starting pd test uses, knob setting for the stand-ins, and stand-in
servers started outside kvdoctor (an external deployment)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from kvdoctor.deploy.ports import free_ports
from kvdoctor.deploy.supervisor import marked_processes
from tests.pd.helpers import KNOB, STANDINS, Deploy

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


@pytest.fixture
def deploy(tmp_path: Path) -> Iterator[Deploy]:
    """Start a stand-in decode + router outside kvdoctor (as a cluster would run them)."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*decode_flags: str) -> dict[str, str]:
        decode_port, router_port, prefill_port = free_ports(3)
        decode = f"http://127.0.0.1:{decode_port}"
        router = f"http://127.0.0.1:{router_port}"
        commands = [
            [
                str(STANDINS / "server.py"),
                "--model-path",
                "m",
                "--disaggregation-mode",
                "decode",
                "--port",
                str(decode_port),
                *decode_flags,
            ],
            [
                str(STANDINS / "router.py"),
                "--pd-disaggregation",
                "--prefill",
                f"http://127.0.0.1:{prefill_port}",
                "--decode",
                decode,
                "--port",
                str(router_port),
            ],
        ]
        for command in commands:
            log = (tmp_path / f"ext{len(procs)}.log").open("w")
            procs.append(subprocess.Popen([sys.executable, *command], stdout=log, stderr=subprocess.STDOUT))
        return {"decode": decode, "router": router}

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()
