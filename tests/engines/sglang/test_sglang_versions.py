"""``--engine sglang`` across SGLang versions: the supported range, the probes, and honest headers (issue 20).

The first half needs no SGLang (the probes are pure; SGLang's modules are stand-ins). The ``sglang``-marked
half runs whichever SGLang is installed: the rules' 0.5.23 in ``make test-sglang``, an overlaid one in
``make test-sglang-overlay VERSION=...`` (``.overlay/sglang-VERSION`` first on PYTHONPATH).
"""

from __future__ import annotations

import os
import subprocess
import sys
import types
from importlib import metadata
from typing import Any

import pytest

from kvdoctor._exceptions import EXIT_INPUT, EngineFinding, EngineUnavailable
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.engines.sglang import _runtime, _support


# ---- the supported range ------------------------------------------------------------------------------
@pytest.mark.parametrize("version", ["0.5.20", "0.5.21", "0.5.22", "0.5.23", "0.5.23.post1"])
def test_versions_inside_the_range_are_driven(version: str) -> None:
    _support.check_version(version)


@pytest.mark.parametrize("version", ["0.5.15", "0.5.19", "0.5.24", "0.6.0", "1.0.0"])
def test_versions_outside_the_range_refuse_with_one_line_naming_version_and_range(version: str) -> None:
    with pytest.raises(EngineUnavailable) as caught:
        _support.check_version(version)
    message = str(caught.value)
    assert caught.value.exit_code == EXIT_INPUT and "\n" not in message
    assert f"SGLang {version} cannot be driven" in message and "SGLang 0.5.20 to 0.5.23" in message


def test_engine_info_refuses_an_installed_version_outside_the_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_runtime, "installed", lambda package, why: EngineRef("sglang", "0.5.15", "/x/sglang"))
    with pytest.raises(EngineUnavailable, match=r"SGLang 0\.5\.15 cannot be driven"):
        _runtime.engine_info()


# ---- the probes ----------------------------------------------------------------------------------------
def test_platform_facts_a_version_does_not_know_are_not_passed() -> None:
    ctx = types.SimpleNamespace(
        _PLATFORM_PROBES={"is_cuda": "is_cuda", "is_sm100": "x"}, _PLATFORM_VALUES={"device_sm": "y"}
    )
    facts = {"is_cuda": True, "is_sm100": True, "device_sm": 100, "is_mps": False, "is_sm110": False}
    passed, unknown = _support.fitted_facts(facts, _support.known_platform_facts(ctx))
    assert passed == {"is_cuda": True, "is_sm100": True, "device_sm": 100}
    assert unknown == ["is_mps", "is_sm110"]
    # an SGLang that lists no facts gets them all (its own override point then judges them)
    assert _support.fitted_facts(facts, _support.known_platform_facts(types.SimpleNamespace())) == (facts, [])


def test_fitted_call_passes_what_the_signature_names_and_builds_lazy_ones_only_then() -> None:
    built: list[str] = []

    def lazy(name: str) -> _support.Lazy:
        return _support.Lazy(lambda: built.append(name) or name)

    def new_shape(*, a: int, b: int) -> tuple[int, int]:
        return a, b

    def old_shape(*, a: int, ps: str) -> tuple[int, str]:
        return a, ps

    assert _support.fitted_call(new_shape, "0.5.23", a=1, b=2, ps=lazy("ps")) == (1, 2)
    assert built == []  # never made for a signature that does not name it
    assert _support.fitted_call(old_shape, "0.5.20", a=1, b=2, ps=lazy("ps")) == (1, "ps")
    assert built == ["ps"]
    with pytest.raises(_support.Missing, match=r"requires c") as caught:
        _support.fitted_call(lambda *, c: c, "0.5.20", a=1)
    assert caught.value.not_available.startswith("not available in SGLang 0.5.20 (")


def test_first_piece_takes_the_name_this_version_gave_the_function() -> None:
    old = types.ModuleType("sglang.srt.mem_cache.common")
    old.retraction_backup = len  # type: ignore[attr-defined]
    assert _support.first_piece(old, _runtime._BACKUP_NAMES, "0.5.20") is len
    with pytest.raises(_support.Missing, match=r"common\.backup_kv_cache or .*common\.retraction_backup"):
        _support.first_piece(types.ModuleType("sglang.srt.mem_cache.common"), _runtime._BACKUP_NAMES, "0.5.19")


# ---- honest messages -----------------------------------------------------------------------------------
def _raised_in_kvdoctor() -> BaseException:
    try:
        _support.piece(
            types.ModuleType("sglang.srt.mem_cache.kv_cache_builder"), "validate_decode_radix_cache", "0.5.22"
        )
    except _support.Missing as exc:
        return exc
    raise AssertionError("piece found a name the module lacks")


def test_a_failure_in_kvdoctors_adapter_is_named_as_kvdoctors_file_not_sglangs() -> None:
    where = _runtime.sglang_frame(_raised_in_kvdoctor())
    assert where.startswith("kvdoctor's own kvdoctor/engines/sglang/_support.py:"), where
    assert not where.startswith("sglang/")


def test_kvdoctors_call_into_another_version_is_an_api_difference_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    exc = _raised_in_kvdoctor()
    monkeypatch.setattr(_runtime, "engine_info", lambda: EngineRef("sglang", "0.5.22", None))
    different = _runtime.api_difference(exc, "drift cell inkling-small · decode+radix")
    assert isinstance(different, EngineUnavailable) and different.exit_code == EXIT_INPUT
    assert "SGLang 0.5.22 cannot be driven: drift cell inkling-small · decode+radix" in str(different)
    assert _runtime.api_difference(EngineFinding("SGLang raised"), "x") is None  # kvdoctor's verdicts stay theirs
    monkeypatch.setattr(_runtime, "engine_info", lambda: EngineRef("sglang", _support.RULES_SGLANG_VERSION, None))
    assert _runtime.api_difference(exc, "x") is None  # on the rules' own version it stays what it was


@pytest.mark.parametrize(("version", "hint"), [("0.5.21", "cannot be driven"), ("0.5.23", "make sglang-env")])
def test_an_import_failure_names_the_version_not_only_a_reinstall(
    monkeypatch: pytest.MonkeyPatch, version: str, hint: str
) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(_runtime, "engine_info", lambda: EngineRef("sglang", version, None))
    with pytest.raises(EngineUnavailable) as caught:
        _runtime.import_sglang("sglang.srt.no_such_module_kvdoctor_test")
    message = str(caught.value)
    assert hint in message and "importing sglang.srt.no_such_module_kvdoctor_test failed" in message
    if version != _support.RULES_SGLANG_VERSION:
        assert "make sglang-env" not in message and "SGLang 0.5.20 to 0.5.23" in message


def test_drift_refuses_when_it_cannot_drive_the_installed_sglang(monkeypatch: pytest.MonkeyPatch) -> None:
    """Exit 2 from the engine side, never a report whose every cell "drifts" with 0 fields compared."""
    from kvdoctor.engines.sglang import drift as drift_mod

    monkeypatch.setattr(_runtime, "engine_info", lambda: EngineRef("sglang", "0.5.21", None))

    def cannot(*args: Any, **kwargs: Any) -> Any:
        raise _support.unsupported("0.5.21", "resolving a launch needs X")

    monkeypatch.setattr(drift_mod, "beside", cannot)
    with pytest.raises(EngineUnavailable, match=r"SGLang 0\.5\.21 cannot be driven"):
        drift_mod.run_drift(["llama-3.1-8b"], ["colocated"])

    def broken_call(*args: Any, **kwargs: Any) -> Any:
        raise _raised_in_kvdoctor()

    monkeypatch.setattr(drift_mod, "beside", broken_call)
    with pytest.raises(EngineUnavailable, match=r"drift cell llama-3\.1-8b · colocated"):
        drift_mod.run_drift(["llama-3.1-8b"], ["colocated"])


def test_a_check_this_version_lacks_leaves_refuses_unasked_and_the_rest_compared() -> None:
    from kvdoctor.engines.sglang.inspect import LiveAnswers, compare

    info = EngineRef("sglang", "0.5.22", None)
    ours = {"refuses": True, "kv_pool": "SWAKVPool", "page_size": 1}
    skipped = {"refuses": "decode radix-cache check not available in SGLang 0.5.22 (...)"}
    live = LiveAnswers(info, [], fields={"refuses": False, "kv_pool": ["SWAKVPool"], "page_size": 1}, skipped=skipped)
    assert compare(ours, live) == []  # not drift: this SGLang could not be asked
    live.skipped = {}
    assert [d.field for d in compare(ours, live)] == ["refuses"]  # asked: the disagreement is drift
    ours["refuses"] = False
    live.skipped, live.fields["page_size"] = skipped, 64
    assert [d.field for d in compare(ours, live)] == ["page_size"]  # the rest still answers


def test_inspect_header_says_whether_the_installed_sglang_is_the_rules_revision() -> None:
    import io

    from rich.console import Console

    from kvdoctor.cli.render.sglang import render_beside
    from kvdoctor.core.sglang.inspect_result import SglangAnswers

    def rendered(version: str) -> str:
        answers = SglangAnswers(
            engine=EngineRef("sglang", version, "/site/sglang"),
            stubs=(),
            refusal=None,
            fields={"page_size": 1},
            skipped={},
            kvdoctor={"page_size": 1},
            kvdoctor_refusal=None,
            drift=(),
            rules_version="0.5.23",
            differs_from_rules=version != "0.5.23",
        )
        out = io.StringIO()
        render_beside(answers, Console(file=out, width=100, emoji=False))
        return out.getvalue()

    assert "installed SGLang 0.5.22 differs from the rules revision (SGLang 0.5.23)" in rendered("0.5.22")
    assert "installed SGLang 0.5.23 is the rules revision (SGLang 0.5.23)" in rendered("0.5.23")


# ---- on the installed SGLang (0.5.23, or an overlay) -----------------------------------------------------
def _kvdoctor(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "TRITON_INTERPRET": "1"}
    return subprocess.run(
        [sys.executable, "-m", "kvdoctor", *args], capture_output=True, text=True, timeout=900, check=False, env=env
    )


@pytest.mark.sglang
def test_inspect_on_the_installed_sglang_answers_and_states_its_version() -> None:
    from tests.schema_check import assert_valid

    out = _kvdoctor(
        "inspect", "inkling-small", "--disaggregation-mode", "decode", "--disaggregation-decode-enable-radix-cache",
        "--engine", "sglang", "--json",
    )  # fmt: skip
    assert out.returncode in (0, 1), out.stderr
    report = assert_valid(out.stdout, "inspect")
    sglang = report["sglang"]
    installed = metadata.version("sglang")
    assert sglang["engine"]["version"] == installed and sglang["rules_version"] == _support.RULES_SGLANG_VERSION
    assert sglang["differs_from_rules"] is (installed != _support.RULES_SGLANG_VERSION)
    asked = [n for n in sglang["fields"] if n not in sglang["skipped"]]
    assert len(asked) >= 15, sglang["skipped"]  # the rest still answers
    if not hasattr(_runtime.import_sglang("sglang.srt.mem_cache.kv_cache_builder"), "validate_decode_radix_cache"):
        assert sglang["skipped"]["refuses"].startswith(f"decode radix-cache check not available in SGLang {installed}")


@pytest.mark.sglang
def test_a_clean_round_trip_runs_on_the_installed_sglangs_own_code() -> None:
    """The done-when launch (Inkling, MXFP8, decode, page 128) at the fault tests' size: every component equal,
    through the installed version's own pools and retraction pair (0.5.20: ``retraction_backup``)."""
    from tests.engines.sglang.test_sglang_roundtrip import INKLING_MXFP8, run

    result = run("inkling-small", INKLING_MXFP8)
    assert result.ok, result.failing
    assert result.engine is not None and result.engine.version == metadata.version("sglang")
    assert {"full_kv_scales", "swa_kv", "conv_state"} <= {r.name for r in result.components}


DRIFT_FIXTURES = ("inkling-small", "qwen3-next-80b-a3b", "llama-3.1-8b")


@pytest.mark.sglang
def test_a_small_drift_matrix_drives_every_cell() -> None:
    """Every cell compared fields, or both sides refused; no cell is an adapter error; the rules' own version
    does not drift at all."""
    from kvdoctor.engines.sglang.drift import run_drift

    report = run_drift(DRIFT_FIXTURES)
    errors = [(r.model, r.case, d.sglang) for r in report.results for d in r.drift if d.field == "error"]
    assert errors == []
    unanswered = [(r.model, r.case) for r in report.results if r.fields == 0 and not r.kvdoctor_refusal]
    assert unanswered == []
    assert report.fields_compared > 0
    if metadata.version("sglang") == _support.RULES_SGLANG_VERSION:
        assert report.ok, [(r.model, r.case, r.drift) for r in report.drifting]


def test_the_versions_page_states_the_range_the_adapter_enforces() -> None:
    """docs/sglang-versions.md and ``_support.SUPPORTED`` cannot disagree: the page names the range and has a
    row for both ends and for 0.5.22 (the version CI overlays)."""
    from pathlib import Path

    page = (Path(__file__).parents[3] / "docs" / "sglang-versions.md").read_text()
    assert _support.supported_range() in page
    for version in (_support.SUPPORTED[0], "0.5.22", _support.SUPPORTED[1]):
        assert f"| {version} " in page, version
