"""Issue 43 (18): the API's keywords held to their annotations. A path given as ``str`` is that path (it was an
``AttributeError`` for ``fault_file`` and ``bundle``), and a wrong type is a ``TypeError`` naming the function and the
keyword, before any work (it was an ``OverflowError``, ``ValueError`` or ``AttributeError`` from deep inside)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvdoctor import api
from kvdoctor.api import _consistency, _replay, _roundtrip


def _captured(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[Any]:
    jobs: list[Any] = []
    monkeypatch.setattr(module, "execute", jobs.append)
    return jobs


def test_paths_given_as_strings_reach_the_job_as_paths(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    jobs = _captured(monkeypatch, _consistency)
    api.consistency(
        "llama-3.1-8b",
        shrink=True,
        fault_file=str(tmp_path / "f.py"),
        bundle=str(tmp_path / "b"),
        output_dir=str(tmp_path / "o"),
        junit_path=str(tmp_path / "j.xml"),
    )
    o = jobs[0].options
    assert (o.fault_file, o.bundle, o.output_dir, o.junit_path) == (
        tmp_path / "f.py",
        tmp_path / "b",
        tmp_path / "o",
        tmp_path / "j.xml",
    )
    assert all(isinstance(p, Path) for p in (o.fault_file, o.bundle, o.output_dir, o.junit_path))


def test_a_model_given_as_a_path_is_its_string(monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = _captured(monkeypatch, _roundtrip)
    api.roundtrip(Path("lfm2-1.2b"), device="cpu")
    assert jobs[0].model == "lfm2-1.2b"


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda: api.consistency("m", requests=float("inf")), "consistency(): requests must be int, got float inf"),
        (lambda: api.consistency("m", requests="abc"), "consistency(): requests must be int, got str 'abc'"),
        (lambda: api.consistency("m", timeout="x"), "consistency(): timeout must be float, got str"),
        (lambda: api.consistency("m", shrink="no"), "consistency(): shrink must be bool"),
        (lambda: api.consistency("m", fault_file=3), "consistency(): fault_file must be Path or None, got int"),
        (lambda: api.consistency(None), "consistency(): model must be str, got NoneType"),
        (lambda: api.consistency("m", server_args=5), "server_args must be str or a list of str, got int"),
        (lambda: api.roundtrip("m", tokens=float("inf")), "roundtrip(): tokens must be int, got float inf"),
        (lambda: api.roundtrip("m", tokens="x"), "roundtrip(): tokens must be int, got str"),
        (lambda: api.roundtrip("m", layers=1.5), "roundtrip(): layers must be int or None, got float 1.5"),
        (lambda: api.roundtrip("m", seed=True), "roundtrip(): seed must be int, got bool"),
        (lambda: api.inspect("m", request_tokens="x"), "inspect(): request_tokens must be int, got str"),
        (lambda: api.inspect("m", concurrent=2.5), "inspect(): concurrent must be int, got float"),
        (lambda: api.replay(bug=5), "replay(): bug must be str or a list of str or None, got int"),
        (lambda: api.replay(bug=["ok", 5]), "replay(): bug must be str or a list of str or None, got list"),
        (lambda: api.replay(timeout="x"), "replay(): timeout must be float, got str"),
    ],
)
def test_a_wrong_type_is_a_type_error_naming_the_keyword(call: Any, says: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (_consistency, _roundtrip, _replay):
        monkeypatch.setattr(module, "execute", lambda job: pytest.fail("the job ran"))
    with pytest.raises(TypeError) as raised:
        call()
    assert says in str(raised.value) and str(raised.value).startswith("kvdoctor.api.")


def test_the_signatures_are_still_the_functions_own() -> None:
    import inspect

    assert list(inspect.signature(api.consistency).parameters)[:2] == ["model", "shrink"]
    assert api.consistency.__doc__ and api.consistency.__name__ == "consistency"
