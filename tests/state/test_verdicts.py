"""What the verdict adds beyond bytes: slot reuse, whether an injected fault hit its target, hazards."""

from __future__ import annotations

import dataclasses

import pytest

from kvdoctor.report.serialize import jsonable
from kvdoctor.state import run as run_mod
from kvdoctor.state.diff import SLOT_REUSE
from kvdoctor.state.faults import FAULTS
from tests.state.helpers import roundtrip, row

INKLING = ("inkling-small", "mxfp8", "--page-size", "128")


def test_restoring_into_the_slots_a_request_already_held_is_red(monkeypatch: pytest.MonkeyPatch) -> None:
    # No intruders: the one retracted request gets its own freed pages straight back, where its old
    # bytes still sit, so every byte compares equal whatever the backup carried.
    monkeypatch.setattr(run_mod._Run, "reuse", lambda run: None)
    result = roundtrip(*INKLING, requests=2)
    assert result.failing == [SLOT_REUSE]
    assert not result.ok
    reuse = row(result, SLOT_REUSE)
    assert reuse.first_request is not None and reuse.first_slot > 0
    assert result.used.restored_into_new_slots is False


def test_a_normal_run_restores_into_fresh_slots() -> None:
    result = roundtrip(*INKLING, requests=2)
    assert result.ok and row(result, SLOT_REUSE).ok
    assert result.used.restored_into_new_slots is True


def test_inject_matched_when_the_fault_breaks_exactly_its_targets() -> None:
    result = roundtrip(*INKLING, inject="drop-block-scale")
    assert result.inject_matched is True
    assert jsonable(result)["inject_matched"] is True
    assert roundtrip(*INKLING).inject_matched is None


def test_inject_not_matched_when_the_fault_breaks_something_else(monkeypatch: pytest.MonkeyPatch) -> None:
    # A fault whose declared target is not what it breaks: the exit code stays 1 (something
    # differs), but the report must say the fault did not do what it claims.
    wrong = dataclasses.replace(FAULTS["drop-swa"], targets=("full_kv",))
    monkeypatch.setitem(FAULTS, "drop-swa", wrong)
    result = roundtrip(*INKLING, inject="drop-swa")
    assert not result.ok
    assert result.expected_red == ["full_kv"] and result.failing == ["swa_kv", "swa_kv_scales"]
    assert result.inject_matched is False


@pytest.mark.parametrize(
    ("model", "flags", "code"),
    [
        (
            "inkling-small",
            ("--disaggregation-decode-retraction-backup", "cpu_tensor", "--attention-backend", "triton"),
            "KVD006",
        ),  # triton: page 1 (Inkling's own default, fa4, takes page 128 on SM100)
        ("gpt-oss-20b", ("--page-size", "128"), "KVD010"),
    ],
)
def test_error_hazards_of_the_launch_line_are_reported(model: str, flags: tuple[str, ...], code: str) -> None:
    result = roundtrip(model, "mxfp8", *flags)
    assert result.ok  # the pool's copy path itself round-trips
    codes = [h["code"] for h in jsonable(result)["hazards"]]
    assert any(c.startswith(code) for c in codes), codes
    assert {h.severity for h in result.hazards} == {"error"}


def test_a_clean_launch_line_reports_no_hazards() -> None:
    assert roundtrip(*INKLING).hazards == []
