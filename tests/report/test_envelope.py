"""The report envelope every ``--json`` report opens with, and the published schemas that hold it.

Three commands build on ``kvdoctor.report.envelope`` and ``kvdoctor.schemas``; these tests pin the
contract they share: the verdict always agrees with the exit code, the header is complete and well
formed, the header wins over a body key of the same name, and the schemas refuse a header that breaks
any of that.
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
from dataclasses import dataclass, fields
from datetime import datetime, timedelta, timezone
from importlib.metadata import version
from typing import Any

import jsonschema
import pytest

from kvdoctor import _exceptions
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.report import envelope
from kvdoctor.report.envelope import SCHEMA_VERSION, RunHeader, Verdict, document, header, record_argv
from kvdoctor.schemas import DIALECT, ReportKind, schema

TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
HEADER_KEYS = [f.name for f in fields(RunHeader)]


@pytest.fixture(autouse=True)
def _no_recorded_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts as an in-process caller that bypassed the entry point, and leaves it so."""
    monkeypatch.setattr(envelope, "_ARGV", None)


# --- Verdict.of ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exit_code", "warnings", "verdict"),
    [
        (0, 0, Verdict.PASS),
        (0, 1, Verdict.WARN),
        (0, 5, Verdict.WARN),
        (1, 0, Verdict.FAIL),
        (1, 2, Verdict.FAIL),
        (2, 0, Verdict.ERROR),
        (3, 0, Verdict.ERROR),
        (4, 1, Verdict.ERROR),
        (130, 0, Verdict.ERROR),
    ],
)
def test_verdict_of_every_exit_code(exit_code: int, warnings: int, verdict: Verdict) -> None:
    assert Verdict.of(exit_code, warnings=warnings) is verdict


def test_every_error_class_exit_code_maps_to_its_verdict() -> None:
    """The error tree's exit codes: 1 (a gate ran and is red) is fail, 2/3/4 (no verdict) are error."""
    codes = {
        cls.exit_code
        for _, cls in inspect.getmembers(_exceptions, inspect.isclass)
        if issubclass(cls, _exceptions.KvdoctorError)
    }
    assert {1, 2, 3, 4} <= codes
    for code in codes:
        assert Verdict.of(code) is (Verdict.FAIL if code == 1 else Verdict.ERROR)


def test_verdict_words_are_distinct() -> None:
    assert len({v.word for v in Verdict}) == len(Verdict)


# --- header() -----------------------------------------------------------------------------------------


def test_header_fields_default_to_kvdoctor_itself() -> None:
    head = header("inspect", exit_code=0, argv_fallback=["inspect", "tiny"])
    installed = version("kvdoctor")
    assert head.schema_version == SCHEMA_VERSION and head.command == "inspect"
    assert head.kvdoctor_version == installed
    assert head.engine == EngineRef("kvdoctor", installed, None)
    assert head.rules_revision is None
    assert TIMESTAMP.match(head.timestamp)
    stamped = datetime.strptime(head.timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    assert abs(datetime.now(timezone.utc) - stamped) < timedelta(minutes=5)
    assert head.command_line == ["kvdoctor", "inspect", "tiny"]
    assert (head.verdict, head.exit_code, head.warnings) == (Verdict.PASS, 0, [])


def test_header_timestamp_is_utc_to_the_second() -> None:
    local = datetime(2025, 3, 4, 5, 6, 7, 890123, tzinfo=timezone(timedelta(hours=2)))
    head = header("drift", exit_code=1, now=local)
    assert head.timestamp == (local - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert TIMESTAMP.match(head.timestamp)


def test_header_command_line_is_the_recorded_argv() -> None:
    record_argv(["roundtrip", "tiny", "--json"])
    head = header("roundtrip", exit_code=0, argv_fallback=["ignored"])
    assert head.command_line == ["kvdoctor", "roundtrip", "tiny", "--json"]
    assert head.command_line[0] == "kvdoctor"


def test_header_carries_engine_revision_and_warnings() -> None:
    sglang = EngineRef("sglang", "0.5.23", "/site-packages/sglang")
    head = header("inspect", exit_code=0, warnings=["KVD003"], engine=sglang, rules_revision="sglang==0.5.23")
    assert (head.engine, head.rules_revision) == (sglang, "sglang==0.5.23")
    assert (head.verdict, head.warnings) == (Verdict.WARN, ["KVD003"])


# --- document() ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Body:
    own: int
    engine: str
    exit_code: int


def test_document_puts_header_keys_first_and_the_header_wins() -> None:
    head = header("inspect", exit_code=1, rules_revision="r")
    for body in (Body(7, "not-the-engine", 0), {"own": 7, "engine": "not-the-engine", "exit_code": 0}):
        doc = document(head, body)
        assert list(doc)[: len(HEADER_KEYS)] == HEADER_KEYS
        assert list(doc)[len(HEADER_KEYS) :] == ["own"]
        assert doc["engine"] == {"name": "kvdoctor", "version": head.kvdoctor_version, "path": None}
        assert (doc["exit_code"], doc["verdict"], doc["own"]) == (1, "fail", 7)
        json.dumps(doc)  # JSON-ready as it stands


def test_document_refuses_a_body_that_is_not_an_object() -> None:
    with pytest.raises(TypeError, match="object"):
        document(header("inspect", exit_code=0), [1, 2])


# --- the published schemas ----------------------------------------------------------------------------


def _header_validator(kind: ReportKind) -> jsonschema.Draft202012Validator:
    """The header part of KIND's shipped schema, as composed (its $defs/header), on its own."""
    full = schema(kind)
    return jsonschema.Draft202012Validator({"$schema": DIALECT, "$defs": full["$defs"], "$ref": "#/$defs/header"})


def _head(kind: ReportKind, **changes: Any) -> dict[str, Any]:
    doc = document(header(kind.value, exit_code=0, argv_fallback=[kind.value]), {})
    return {**doc, **changes}


@pytest.mark.parametrize("kind", list(ReportKind))
def test_every_shipped_schema_is_draft_2020_12(kind: ReportKind) -> None:
    full = schema(kind)
    jsonschema.Draft202012Validator.check_schema(full)
    assert full["$schema"] == DIALECT
    assert full["$id"].endswith(f":{kind.value}:{SCHEMA_VERSION}")
    assert schema(kind.value) == full  # a kind given by its value reads the same file


def test_an_unknown_kind_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="bogus"):
        schema("bogus")  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", list(ReportKind))
@pytest.mark.parametrize(("exit_code", "warnings"), [(0, []), (0, ["w"]), (1, []), (2, []), (3, ["w"]), (4, [])])
def test_the_header_of_every_exit_code_validates(kind: ReportKind, exit_code: int, warnings: list[str]) -> None:
    doc = document(header(kind.value, exit_code=exit_code, warnings=warnings), {})
    assert list(_header_validator(kind).iter_errors(doc)) == []


BROKEN = {
    "pass exits 1": {"verdict": "pass", "exit_code": 1},
    "warn exits 2": {"verdict": "warn", "exit_code": 2, "warnings": ["w"]},
    "fail exits 0": {"verdict": "fail", "exit_code": 0},
    "error exits 1": {"verdict": "error", "exit_code": 1},
    "error exits 0": {"verdict": "error", "exit_code": 0},
    "pass with warnings": {"verdict": "pass", "warnings": ["w"]},
    "warn without warnings": {"verdict": "warn", "warnings": []},
    "unknown verdict": {"verdict": "ok"},
    "space for T": {"timestamp": "2025-03-04 05:06:07Z"},
    "offset for Z": {"timestamp": "2025-03-04T05:06:07+00:00"},
    "fractional seconds": {"timestamp": "2025-03-04T05:06:07.5Z"},
    "no time": {"timestamp": "2025-03-04"},
    "not kvdoctor's argv": {"command_line": ["python", "-m", "kvdoctor"]},
    "empty argv": {"command_line": []},
    "schema major 2": {"schema_version": "2.0"},
    "unknown engine": {"engine": {"name": "trtllm", "version": None, "path": None}},
}


@pytest.mark.parametrize("kind", list(ReportKind))
@pytest.mark.parametrize("case", sorted(BROKEN))
def test_the_header_rejects_a_broken_header(kind: ReportKind, case: str) -> None:
    validator = _header_validator(kind)
    good = _head(kind)
    assert list(validator.iter_errors(good)) == []
    assert list(validator.iter_errors({**good, **BROKEN[case]})) != []


@pytest.mark.parametrize("kind", list(ReportKind))
@pytest.mark.parametrize("key", HEADER_KEYS)
def test_the_header_rejects_a_missing_key(kind: ReportKind, key: str) -> None:
    doc = _head(kind)
    del doc[key]
    errors = list(_header_validator(kind).iter_errors(doc))
    assert any(e.validator == "required" and key in e.message for e in errors)


@pytest.mark.parametrize("kind", list(ReportKind))
def test_each_schema_pins_its_own_command(kind: ReportKind) -> None:
    other = next(k for k in ReportKind if k is not kind)
    errors = jsonschema.Draft202012Validator(schema(kind)).iter_errors(_head(kind, command=other.value))
    assert any(e.validator == "const" and list(e.absolute_path) == ["command"] for e in errors)


# --- kvdoctor schema ----------------------------------------------------------------------------------


def _kvdoctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvdoctor", *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("kind", list(ReportKind))
def test_schema_command_prints_exactly_the_schema(kind: ReportKind) -> None:
    out = _kvdoctor("schema", kind.value)
    assert out.returncode == 0, out.stderr
    assert out.stdout == json.dumps(schema(kind), indent=2) + "\n"


def test_schema_command_refuses_an_unknown_kind_in_one_line() -> None:
    out = _kvdoctor("schema", "bogus")
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvdoctor: error:") and "bogus" in lines[0]


def test_the_entry_point_forgets_its_argv_when_it_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    """A later in-process run must not report an earlier run's command line as its own."""
    from kvdoctor.cli.app import main
    from kvdoctor.report.envelope import command_line

    monkeypatch.setattr(sys, "argv", ["kvdoctor", "--version"])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 0
    assert command_line(["inspect", "x"]) == ["kvdoctor", "inspect", "x"]
