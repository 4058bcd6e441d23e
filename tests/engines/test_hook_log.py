"""The in-server event log: one writer (``append``) and one reader (``read``/``parse``) of ``PID EVENT DETAIL``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvdoctor.engines import hook_log

LOG_ENV = "KVDOCTOR_HOOK_LOG"


def test_what_append_writes_read_gives_back_detail_spaces_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "hook.log"
    monkeypatch.setenv(LOG_ENV, str(path))
    hook_log.append(LOG_ENV, "patched", "MooncakeKVSender.supports_host_tensor_indices")
    hook_log.append(LOG_ENV, "hook-failed", "RuntimeError: no  such thing")
    hook_log.append(LOG_ENV, "fault-offload")
    log = hook_log.read(path)
    assert log.names() == ["patched", "hook-failed", "fault-offload"]
    assert log.details("hook-failed") == ["RuntimeError: no  such thing"]
    assert {e.pid for e in log} == {str(os.getpid())}
    assert [e.text for e in log] == [
        "patched MooncakeKVSender.supports_host_tensor_indices",
        "hook-failed RuntimeError: no  such thing",
        "fault-offload",
    ]


def test_a_missing_log_reads_as_no_events(tmp_path: Path) -> None:
    log = hook_log.read(tmp_path / "never-written.log")
    assert list(log) == [] and log.count("fault-fired") == 0 and log.first("fault-refused") is None


def test_counts_and_first_detail_read_the_events_by_name() -> None:
    log = hook_log.parse(
        [
            "7 fault-installed drop-kv x._update_states",
            "",
            "7 fault-fired req 1",
            "8 fault-fired req 2",
            "8 fault-failed boom: it broke",
            "8 fault-refused later",
        ]
    )
    assert log.count("fault-fired") == 2 and log.count("fault-failed", "fault-refused") == 2
    assert log.first("fault-failed", "fault-refused") == "boom: it broke"
    assert "fault-installed" in log.names() and len(log.events) == 5  # the blank line is no event


def test_faults_are_fault_events_and_a_plugin_loaded_with_a_fault() -> None:
    lines = ["1 loaded -", "2 loaded drop-kv", "3 patched x", "4 fault-armed drop-kv on Req.offload_kv_cache", "5"]
    assert hook_log.faults(lines) == ["loaded drop-kv", "fault-armed drop-kv on Req.offload_kv_cache"]
    assert hook_log.parse(lines).faults() == hook_log.faults(lines)


def test_the_reader_reads_what_the_runs_split_readings_read() -> None:
    """The run's readers (``consistency/run.py``: ``line.split(" ", 2)``) and this one agree on every event's name
    and detail, so moving them onto it changes no count or message."""
    lines = ["1 patched A", "2 fault-refused no  room here", "3 fault-offload", "4 hook-failed E: x", "5 loaded -"]
    split = [line.split(" ", 2) for line in lines]
    log = hook_log.parse(lines)
    assert log.names() == [e[1] for e in split if len(e) > 1]
    assert log.details("fault-refused", "hook-failed") == [
        " ".join(e[2:]) for e in split if e[1] in ("fault-refused", "hook-failed")
    ]
    assert log.count("fault-offload") == sum(e[1] == "fault-offload" for e in split)
