"""``kvdoctor drift --all-architectures``: configs generated from SGLang's own registry, run through the drift cells.

The first tests need no SGLang (option checks, the generator's skip accounting, the exit-code contract on a
typed result); those marked ``sglang`` walk the installed SGLang's registry (loaded once per process, ~1 min)
and run a handful of model types under one case.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvdoctor.cli.app import app
from kvdoctor.core.drift_result import ArchitectureTotals, GeneratedDriftReport, ModelTypeVerdict, SglangCaseResult
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.core.sglang.inspect_result import FieldDrift
from kvdoctor.engines.sglang import architectures
from kvdoctor.engines.sglang import drift as drift_mod
from tests.schema_check import assert_valid

NARROW = {"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"}


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, ["drift", *args], env=NARROW, catch_exceptions=False)


# -- no SGLang needed -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("--all-architectures", "--fixture", "llama-3.1-8b"),
        ("--all-architectures", "--server", "vllm"),
        ("--strict",),
        ("--model-type", "llama"),
    ],
    ids=["with-fixture", "with-vllm", "strict-alone", "model-type-alone"],
)
def test_conflicting_options_are_refused_in_one_line(args: tuple[str, ...]) -> None:
    run = cli(*args)
    assert run.exit_code == 2, run.output
    assert run.output.startswith("kvdoctor: error: ") and len(run.output.strip().splitlines()) == 1, run.output


def test_a_non_empty_output_dir_is_refused_and_left_untouched(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("keep")
    run = cli("--all-architectures", "--output-dir", str(tmp_path))
    assert run.exit_code == 2 and "not an empty directory" in run.output, run.output
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"] and (tmp_path / "mine.txt").read_text() == "keep"


class Builds:
    model_type = "builds"

    def to_dict(self) -> dict[str, Any]:
        return {"hidden_size": 64, "num_attention_heads": 4}


class NeedsArguments:
    def __init__(self, vocab: int) -> None:  # a config class with no usable defaults
        self.vocab = vocab


class NotJson:
    def to_dict(self) -> dict[str, Any]:
        return {"dtype": object()}


def test_a_model_type_the_registry_lacks_is_refused_naming_it(tmp_path: Path) -> None:
    """A misspelt (or comma-joined) --model-type is exit 2 naming it, never an empty set reported as 'nothing to
    compare' and never a config written."""
    from kvdoctor._exceptions import EXIT_INPUT, InputError

    found = [architectures.Candidate("builds", Builds, "BuildsForCausalLM")]
    with pytest.raises(InputError) as caught:
        architectures.generate(tmp_path, only=("buils",), found=found)
    assert caught.value.exit_code == EXIT_INPUT
    assert "'buils'" in str(caught.value) and "did you mean 'builds'" in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_a_config_that_does_not_construct_is_counted_as_skipped_not_crashed(tmp_path: Path) -> None:
    found = [
        architectures.Candidate("builds", Builds, "BuildsForCausalLM"),
        architectures.Candidate("needs_arguments", NeedsArguments, "NeedsForCausalLM"),
        architectures.Candidate("not_json", NotJson, "NotJsonForCausalLM"),
        architectures.Candidate("vision_only", Builds, None),
    ]
    made = architectures.generate(tmp_path, found=found)
    assert [g.model_type for g in made.generated] == ["builds"]
    assert made.skipped == {
        "needs_arguments": architectures.NO_CONSTRUCT,
        "not_json": architectures.NO_SERIALIZE,
        "vision_only": architectures.NO_ARCHITECTURE,
    }
    assert made.skipped_by_reason == {
        architectures.NO_ARCHITECTURE: 1,
        architectures.NO_CONSTRUCT: 1,
        architectures.NO_SERIALIZE: 1,
    }
    written = json.loads((tmp_path / "builds" / "config.json").read_text())
    assert written == {"hidden_size": 64, "num_attention_heads": 4, "model_type": "builds",
                       "architectures": ["BuildsForCausalLM"]}  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["builds"]  # nothing written for a skipped type


def test_a_config_sglang_fails_on_is_skipped_with_its_reason_not_run(tmp_path: Path) -> None:
    """SGLang failing on a class default no checkpoint has (a None where real configs hold a number) is a counted
    skip naming the failure, not drift; nothing is left written for it."""
    reason = f"{architectures.DEFAULTS_FAIL}: TypeError: 'NoneType' object is not iterable"
    found = [
        architectures.Candidate("builds", Builds, "BuildsForCausalLM"),
        architectures.Candidate("broken", Builds, "BrokenForCausalLM"),
    ]
    probed: list[str] = []

    def probe(directory: Path) -> str | None:
        probed.append(directory.name)
        assert (directory / "config.json").is_file()  # SGLang reads the written file
        return reason if directory.name == "broken" else None

    made = architectures.generate(tmp_path, found=found, probe=probe)
    assert probed == ["builds", "broken"]
    assert [g.model_type for g in made.generated] == ["builds"]
    assert made.skipped == {"broken": reason} and made.skipped_by_reason == {reason: 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["builds"]


def _raised(exc: BaseException, module: str) -> BaseException:
    """EXC as raised by code of MODULE (its last traceback frame's module)."""
    try:
        exec(compile("raise exc", f"<{module}>", "exec"), {"__name__": module, "exc": exc})
    except BaseException as caught:  # the point is to keep it
        return caught
    raise AssertionError("not raised")


def test_a_crash_on_a_value_is_told_from_a_deliberate_sglang_refusal() -> None:
    crash = architectures._crash
    assert crash(_raised(TypeError("'NoneType' object is not iterable"), "sglang.srt.configs.model_config"))
    assert crash(_raised(RuntimeError("'head_dim' is a per-layer attribute"), "transformers.configuration_utils"))
    assert not crash(_raised(ValueError("IQuestQ1 requires FA3 attention"), "sglang.srt.arg_groups.model_overrides"))
    assert not crash(_raised(AssertionError("local_layer_ids must be unique"), "sglang.srt.configs.model_config"))


@pytest.mark.parametrize("deliberate", [False, True], ids=["crash", "refusal"])
def test_defaults_failure_reads_the_cause_of_sglangs_refusal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, deliberate: bool
) -> None:
    from kvdoctor._exceptions import EngineRefuses

    def resolve(model: str, argv: list[str]) -> Any:
        cause = ValueError("refused on purpose") if deliberate else TypeError("'NoneType' object is not iterable")
        try:
            raise _raised(cause, "sglang.srt.configs.model_config")
        except Exception:
            raise EngineRefuses("SGLang refuses this launch at start-up: ...") from None  # as _runtime does

    monkeypatch.setattr(architectures._runtime, "resolve", resolve)
    expected = None if deliberate else f"{architectures.DEFAULTS_FAIL}: TypeError: 'NoneType' object is not iterable"
    assert architectures.defaults_failure(tmp_path) == expected


@pytest.mark.parametrize(
    ("config", "full_pool", "swa_pool"),
    [("LAGUNA", "MHATokenToKVPool", None), ("IQUEST_Q1_MTP", None, "MHATokenToKVPool")],
    ids=["laguna-no-sliding-layer", "iquest-draft-all-sliding"],
)
def test_a_sub_pool_without_layers_is_compared_as_none(
    config: str, full_pool: str | None, swa_pool: str | None
) -> None:
    """SGLang's side names a sub-pool without layers none (``_holds_layers``); kvdoctor's answers do the same for the
    SWAKVPool sub-pool it builds without layers, or Laguna and IQuest Q1's MTP draft drift on it."""
    from kvdoctor.engines.sglang.inspect import rule_answers
    from tests.core.sglang import test_generated_architectures as generated

    answers = rule_answers(generated.analysed(getattr(generated, config)), None)
    assert (answers["kv_pool"], answers["full_pool"], answers["swa_pool"]) == ("SWAKVPool", full_pool, swa_pool)


def generated_report(*, strict: bool) -> GeneratedDriftReport:
    cells = [
        SglangCaseResult("llama", "colocated", ("--max-total-tokens", "65536"), 30),
        SglangCaseResult("zaya", "decode", ("--disaggregation-mode", "decode"), 40, [FieldDrift("kv_pool", "A", "B")]),
    ]
    totals = ArchitectureTotals(
        registry_architectures=268,
        model_types=3,
        generated=2,
        skipped_by_reason={architectures.NO_ARCHITECTURE: 1},
        skipped_model_types={"mamba": architectures.NO_ARCHITECTURE},
        per_model_type=[
            ModelTypeVerdict("llama", "LlamaForCausalLM", True, 1, 0),
            ModelTypeVerdict("zaya", "ZayaForCausalLM", False, 1, 1),
        ],
        strict=strict,
    )
    return GeneratedDriftReport(EngineRef("sglang", "0.5.23", "/x/sglang"), cells, 3.0, "sm100", totals)


@pytest.mark.parametrize("strict", [False, True], ids=["reported", "strict"])
def test_generated_set_drift_is_reported_unless_strict(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, strict: bool
) -> None:
    monkeypatch.setattr(drift_mod, "run_all_architectures", lambda *a, **k: generated_report(strict=strict))
    monkeypatch.setattr("kvdoctor.api._drift_sides.require", lambda *a, **k: type("A", (), {"title": "SGLang"})())
    junit = tmp_path / "junit.xml"
    args = ["--all-architectures", "--json", "--junit", str(junit), *(["--strict"] if strict else [])]
    run = cli(*args)
    doc = assert_valid(run.stdout, "drift")
    assert run.exit_code == (1 if strict else 0), run.output
    assert doc["verdict"] == ("fail" if strict else "warn")  # never "pass" while a cell drifts
    assert doc["ok"] is False and doc["architectures"]["skipped"] == 1 and doc["architectures"]["generated"] == 2
    assert doc["results"][1]["model"] == "zaya"
    statuses = [child.tag for case in ET.parse(junit).iter("testcase") for child in case]
    assert ("failure" in statuses) == strict and ("skipped" in statuses) == (not strict)
    # the schema ties the exit code to the mode: a reported run claiming exit 1 is invalid, and vice versa
    with pytest.raises(AssertionError):
        assert_valid(json.dumps({**doc, "exit_code": 0 if strict else 1}), "drift")


def test_generated_set_table_names_every_model_type_and_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(drift_mod, "run_all_architectures", lambda *a, **k: generated_report(strict=False))
    monkeypatch.setattr("kvdoctor.api._drift_sides.require", lambda *a, **k: type("A", (), {"title": "SGLang"})())
    run = cli("--all-architectures")
    assert run.exit_code == 0, run.output
    out = run.stdout
    assert "ZayaForCausalLM" in out and "LlamaForCausalLM" in out
    assert f"skipped ({architectures.NO_ARCHITECTURE}): 1: mamba" in out
    assert "verdict: passed with warnings — 2 cases, 70 fields compared, 1 drifting" in out, out  # never "passed"
    assert "268 registry architectures, 3 model types, 2 generated, 1 skipped" in " ".join(out.split())
    assert "1 of 2 model types drifting" in " ".join(out.split())


# -- against the installed SGLang --------------------------------------------------------------------

KNOWN = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM", "gemma2": "Gemma2ForCausalLM"}


@pytest.fixture(scope="module")
def registry() -> tuple[int, list[architectures.Candidate]]:
    return architectures.candidates()  # SGLang's registry, imported once for this module


@pytest.mark.sglang
def test_the_registry_maps_known_model_types_to_their_architecture(
    registry: tuple[int, list[architectures.Candidate]], tmp_path: Path
) -> None:
    archs, found = registry
    by_type = {c.model_type: c for c in found}
    assert archs > 100 and len(found) > 50
    assert {t: by_type[t].architecture for t in KNOWN} == KNOWN
    made = architectures.generate(tmp_path, only=tuple(KNOWN), found=found)
    assert sorted(g.model_type for g in made.generated) == sorted(KNOWN) and not made.skipped
    llama = json.loads((tmp_path / "llama" / "config.json").read_text())
    from transformers import LlamaConfig

    defaults = LlamaConfig()  # nothing shrunk: the geometry is the class's own defaults
    assert (llama["hidden_size"], llama["num_attention_heads"], llama["num_key_value_heads"]) == (
        defaults.hidden_size,
        defaults.num_attention_heads,
        defaults.num_key_value_heads,
    )
    assert llama["architectures"] == ["LlamaForCausalLM"] and llama["model_type"] == "llama"


@pytest.mark.sglang
def test_a_few_model_types_run_one_case_and_clean_up(
    registry: tuple[int, list[architectures.Candidate]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    made: list[Path] = []
    real_mkdtemp = drift_mod.tempfile.mkdtemp

    def mkdtemp(**kwargs: Any) -> str:
        made.append(Path(real_mkdtemp(dir=tmp_path, **kwargs)))
        return str(made[-1])

    monkeypatch.setattr(drift_mod.tempfile, "mkdtemp", mkdtemp)
    report = drift_mod.run_all_architectures(("colocated",), model_types=("llama", "qwen3"))
    assert report.architectures is not None and report.architectures.generated == 2
    assert [r.model for r in report.results] == ["llama", "qwen3"] and all(r.fields > 10 for r in report.results)
    assert [m.model_type for m in report.architectures.per_model_type] == ["llama", "qwen3"]
    assert made and not made[0].exists()  # the temporary configs are removed
    assert report.architectures.output_dir is None


@pytest.mark.sglang
@pytest.mark.parametrize(
    "listed",
    [[], [architectures.Candidate("vision_only", object, None)]],
    ids=["empty-registry", "all-skipped"],
)
def test_zero_generated_configs_is_a_refusal_never_a_pass(
    registry: tuple[int, list[architectures.Candidate]],
    monkeypatch: pytest.MonkeyPatch,
    listed: list[architectures.Candidate],
) -> None:
    monkeypatch.setattr(architectures, "candidates", lambda: (0, listed))
    run = cli("--all-architectures", "--case", "colocated", "--json")
    assert run.exit_code == 2, run.output
    assert "generated no config" in run.output and '"verdict": "pass"' not in run.output


@pytest.mark.sglang
def test_the_alias_table_is_the_installed_config_classes_attribute_map() -> None:
    """kvdoctor/core/config_aliases.py (generated) against the classes SGLang's loader builds: a stale table would
    make kvdoctor read a field the class does not alias (or refuse one it does)."""
    import sglang.srt.utils.hf_transformers.common  # noqa: F401  registers SGLang's config classes
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from kvdoctor.core.config_aliases import CONFIG_ALIASES
    from kvdoctor.core.config_rules import ALIASED_FIELDS

    for model_type in ("gpt2", "gptj", "gpt_bigcode", "chatglm", "bloom", "mpt", "llama"):
        amap = dict(getattr(CONFIG_MAPPING[model_type], "attribute_map", {}) or {})
        ours = CONFIG_ALIASES.get(model_type, {})
        assert {f: ours.get(f) for f in ALIASED_FIELDS} == {f: amap.get(f) for f in ALIASED_FIELDS}, model_type


# The model types drift --all-architectures found drifting (issue 20, point 3), now corrected: the rule model
# (loop layers, per-layer intermediate_size, sub-pools without layers, IQuest Q1's FA3) and the adapter (a loop
# model's layer range, an all-SWA pool's full tokens); glm5_next's class default SGLang fails on is a skip.
CORRECTED = ("gemma3n_text", "iquest_q1_mtp", "laguna", "nanbeige")


@pytest.mark.sglang
def test_the_corrected_model_types_no_longer_drift(registry: tuple[int, list[architectures.Candidate]]) -> None:
    report = drift_mod.run_all_architectures(("colocated", "decode"), model_types=(*CORRECTED, "glm5_next"))
    assert report.architectures is not None
    assert [m.model_type for m in report.architectures.per_model_type] == list(CORRECTED)
    drifting = {(r.model, r.case): [d.field for d in r.drift] for r in report.results if not r.ok}
    assert drifting == {} and all(r.fields > 10 for r in report.results)
    assert report.architectures.skipped_model_types["glm5_next"].startswith(f"{architectures.DEFAULTS_FAIL}: ")
