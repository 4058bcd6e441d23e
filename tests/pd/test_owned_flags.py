"""Issue 28, defects 2 and 12 for pd-eval: the flags its plan sets, refused after ``--`` however SGLang spells
them, each refusal naming pd-eval's own option.

``pd-eval MODEL -- --model PATH`` loaded PATH on prefill and decode (SGLang's last ``--model-path`` wins) while
the result named MODEL; ``--model-path`` was not in the plan's flags at all, and its alias ``--model`` would have
passed a check by name anyway. The plan's flags are now held by dest (``kvdoctor.core.owned_flags``), checked in
``argv.check_server_words`` before any mode's work, so ``--oracle tokens`` names pd-eval's options, not
consistency's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdoctor._exceptions import InputError
from kvdoctor.core.owned_flags import spellings
from kvdoctor.core.sglang._generated.server_flags import SGLANG_FLAG_DESTS, SGLANG_FLAG_VALUES, SGLANG_SERVER_FLAGS
from kvdoctor.deploy import plan
from tests.consistency.test_owned_flags import shortest_prefix, value
from tests.pd.helpers import GSM8K, invoke

CONSISTENCY_ONLY = ("consistency runs", "consistency places", "--topology", "kvdoctor picks a free")


def plan_words() -> list[tuple[str, str]]:
    """(word, plan flag): every spelling of every flag the plan sets, and each one's shortest unique prefix."""
    out = []
    for flag in plan.PLAN_FLAGS:
        for option in sorted(spellings(flag, SGLANG_FLAG_DESTS)):
            out.append((option, flag))
            prefix = shortest_prefix(option, SGLANG_SERVER_FLAGS)
            if prefix is not None:
                out.append((prefix, flag))
    return out


@pytest.mark.parametrize(("word", "flag"), plan_words())
def test_every_spelling_of_a_plan_flag_is_refused(word: str, flag: str) -> None:
    dest = SGLANG_FLAG_DESTS[flag]
    full = next(k for k in SGLANG_SERVER_FLAGS if k.startswith(word) and SGLANG_FLAG_DESTS[k] == dest)
    with pytest.raises(InputError) as caught:
        plan.check_extra_args((word, *value(full, SGLANG_FLAG_VALUES)))
    message = str(caught.value)
    assert message.startswith(f"{word} after -- would contradict the launch plan")
    assert flag in message and plan.PLAN_FLAGS[flag] in message


@pytest.mark.parametrize(
    "words", [["--mem-fraction-static", "0.5"], ["--speculative-draft-model", "d"], ["--model-impl", "transformers"]]
)
def test_a_flag_the_plan_does_not_set_still_passes(words: list[str]) -> None:
    assert plan.check_extra_args(tuple(words))


def pd_eval(tmp_path: Path, *args: str) -> tuple[int, list[str]]:
    out = tmp_path / "out"
    run = invoke(["pd-eval", "m", "--dry-run", "--data-path", str(GSM8K), "--output-dir", str(out), *args])
    assert not out.exists()
    return run.exit_code, [line for line in run.output.splitlines() if line.strip()]


@pytest.mark.parametrize("words", [["--model", "/elsewhere/m"], ["--model-path", "/x"], ["--model-pa=/x"]])
def test_the_model_cannot_be_swapped_after_the_separator(tmp_path: Path, words: list[str]) -> None:
    code, lines = pd_eval(tmp_path, "--", *words)
    assert code == 2 and len(lines) == 1, lines
    typed = words[0].partition("=")[0]
    assert lines[0].startswith(f"kvdoctor: error: {typed} after -- would contradict the launch plan")
    assert lines[0].endswith("; the model is pd-eval's MODEL")


@pytest.mark.parametrize(
    ("words", "instead"),
    [
        (["--tp", "2"], "use pd-eval's --tp instead"),  # pd-eval's own option, and SGLang's prefix of --tp-size
        (["--port", "1"], "use pd-eval's --prefill-port / --decode-port instead"),
        (["--disaggregation-transfer-backend", "nixl"], "use pd-eval's --transfer-backend instead"),
        (["--config", "my.yaml"], "kvdoctor does not read it"),
    ],
)
def test_refusals_name_pd_evals_own_options(tmp_path: Path, words: list[str], instead: str) -> None:
    code, lines = pd_eval(tmp_path, "--", *words)
    assert code == 2 and len(lines) == 1, lines
    assert f"{words[0]} after -- would contradict the launch plan" in lines[0] and instead in lines[0]


@pytest.mark.parametrize(
    ("words", "instead"),
    [
        (["--model", "/elsewhere/m"], "the model is pd-eval's MODEL"),
        (["--port", "1"], "use pd-eval's --prefill-port / --decode-port instead"),
        (["--disaggregation-bootstrap", "9"], "use pd-eval's --bootstrap-port instead"),
        (["--tensor-parallel", "2"], "use pd-eval's --tp instead"),
    ],
)
def test_the_tokens_oracle_names_pd_evals_options_not_consistencys(
    tmp_path: Path, words: list[str], instead: str
) -> None:
    """--oracle tokens runs consistency's preparation: its refusals once named consistency's terms there."""
    out = tmp_path / "out"
    tokens = ["pd-eval", "llama-3.1-8b", "--oracle", "tokens", "--shrink", "--dry-run", "--output-dir", str(out)]
    run = invoke([*tokens, "--", *words])
    lines = [line for line in run.output.splitlines() if line.strip()]
    assert run.exit_code == 2 and len(lines) == 1, lines
    assert f"{words[0]} after -- would contradict the launch plan" in lines[0] and instead in lines[0]
    assert not any(other in lines[0] for other in CONSISTENCY_ONLY), lines[0]
    assert not out.exists()


def test_a_flag_the_plan_does_not_set_reaches_the_dry_run_plan(tmp_path: Path) -> None:
    code, lines = pd_eval(tmp_path, "--", "--mem-fraction-static", "0.5")
    assert code == 0, lines
    assert sum("--mem-fraction-static 0.5" in line for line in lines) == 2  # prefill and decode
