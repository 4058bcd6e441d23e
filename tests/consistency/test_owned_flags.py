"""Issue 28, defects 2 and 12: the flags consistency sets, refused after ``--`` however the server spells them,
and every refusal naming consistency's own terms.

``consistency MODEL --shrink -- --model PATH`` once swapped the model on every server while the report named
the seeded checkpoint: ``--model`` is SGLang's alias of ``--model-path`` and the check matched names. Now an
owned flag is held by its dest (the generated ``*_FLAG_DESTS`` tables, read from each server's own parser;
tests/engines/sglang/test_sglang_owned_flags.py and tests/engines/vllm/test_vllm_owned_flags.py hold them to
the installed parsers): every alias, unique prefix and (vLLM) underscore spelling is refused, exit 2, one line,
before any work. And the refusals no longer name pd-eval's options (``--prefill-port``, ``--bootstrap-port``, ``--tp``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvdoctor._exceptions import InputError
from kvdoctor.cli.app import app
from kvdoctor.consistency import deploy
from kvdoctor.consistency.servers.vllm import plan as deploy_vllm
from kvdoctor.core.owned_flags import spellings
from kvdoctor.core.sglang._generated.server_flags import SGLANG_FLAG_DESTS, SGLANG_FLAG_VALUES, SGLANG_SERVER_FLAGS
from kvdoctor.core.vllm._generated.server_flags import VLLM_FLAG_DESTS, VLLM_FLAG_VALUES, VLLM_SERVER_FLAGS
from kvdoctor.deploy import plan

ROOT = Path(__file__).resolve().parents[2]
# What only pd-eval offers: a consistency refusal must never send the user to these.
PD_EVAL_ONLY = (
    "--prefill-port",
    "--decode-port",
    "--bootstrap-port",
    "--transfer-backend",
    "pd-eval's",
    "--tp instead",
)


def value(option: str, table: dict[str, tuple[str, object, object]]) -> list[str]:
    """Words OPTION takes that the server's parser accepts: none for a switch, a choice, or a number."""
    kind, nargs, choices = table[option]
    if nargs == 0:
        return []
    if choices:
        return [str(choices[0])]
    kind = kind.removeprefix("optional:")
    if kind == "json" or kind.endswith("parse_dataclass"):
        return ["{}"]
    return ["1"] if kind in ("int", "float", "sglang_human_int", "vllm_human_int") else ["x"]


def shortest_prefix(option: str, known: frozenset[str]) -> str | None:
    """The shortest unique prefix the server's argparse expands to OPTION (None: every prefix is shared)."""
    for end in range(3, len(option)):
        word = option[:end]
        if [k for k in known if k.startswith(word)] == [option]:
            return word
    return None


def sglang_words() -> list[tuple[str, str]]:
    """(word, owned flag): every spelling of every flag consistency owns, and each one's shortest unique prefix."""
    out = []
    for flag in deploy.OWNED_FLAGS:
        for option in sorted(spellings(flag, SGLANG_FLAG_DESTS)):
            out.append((option, flag))
            prefix = shortest_prefix(option, SGLANG_SERVER_FLAGS)
            if prefix is not None:
                out.append((prefix, flag))
    return out


def vllm_words(owned: dict[str, str]) -> list[tuple[str, str]]:
    """(word, owned flag) for vLLM: every spelling, its underscore spelling and its shortest unique prefix."""
    out = []
    for flag in owned:
        for option in sorted(spellings(flag, VLLM_FLAG_DESTS)):
            out.append((option, flag))
            if "-" in option[2:]:
                out.append(("--" + option[2:].replace("-", "_"), flag))
            prefix = shortest_prefix(option, VLLM_SERVER_FLAGS)
            if prefix is not None:
                out.append((prefix, flag))
    return out


# --- the resolver, SGLang: every alias and abbreviation of every owned flag ---


def test_the_issues_case_is_named_as_typed_and_as_the_flag_it_sets() -> None:
    with pytest.raises(InputError) as caught:
        deploy.check_extra_args(("--model", "/elsewhere/other-model"))
    message = str(caught.value)
    assert message.startswith("--model after -- is not allowed (SGLang reads it as --model-path, its alias): ")
    assert "seeded random one" in message and "sha256" in message and "\n" not in message


@pytest.mark.parametrize(
    ("words", "reading"),
    [
        (["--model-pa", "m"], "(SGLang reads it as --model-path, a unique prefix)"),
        (["--model=m"], "(SGLang reads it as --model-path, its alias)"),
        (["--tp", "2"], "(SGLang reads it as --tp-size, a unique prefix)"),
        (
            ["--tensor-parallel", "2"],
            "(SGLang reads it as --tp-size, a unique prefix of its alias --tensor-parallel-size)",
        ),
        (["--schedule-c", "0.3"], "(SGLang reads it as --schedule-conservativeness, a unique prefix)"),
        (["--max-total", "99"], "(SGLang reads it as --max-total-tokens, a unique prefix)"),
        (["--load-f=dummy"], "(SGLang reads it as --load-format, a unique prefix)"),
    ],
)
def test_a_few_abbreviations_read_as_sglang_reads_them(words: list[str], reading: str) -> None:
    with pytest.raises(InputError, match="after -- is not allowed") as caught:
        deploy.check_extra_args(tuple(words))
    assert str(caught.value).startswith(f"{words[0].partition('=')[0]} after -- is not allowed {reading}: ")


@pytest.mark.parametrize(("word", "flag"), sglang_words())
def test_every_spelling_of_an_owned_flag_is_refused(word: str, flag: str) -> None:
    full = next(
        k for k in SGLANG_SERVER_FLAGS if k.startswith(word) and SGLANG_FLAG_DESTS[k] == SGLANG_FLAG_DESTS[flag]
    )
    with pytest.raises(InputError) as caught:
        deploy.check_extra_args((word, *value(full, SGLANG_FLAG_VALUES)))
    message = str(caught.value)
    assert message.startswith(f"{word} after -- is not allowed")
    assert flag in message and deploy.OWNED_FLAGS[flag] in message
    assert not any(other in message for other in PD_EVAL_ONLY), message


@pytest.mark.parametrize(
    "words",
    [
        ["--mem-fraction-static", "0.5"],
        ["--speculative-draft-model", "d"],  # an alias of --speculative-draft-model-path, not of --model-path
        ["--model-impl", "transformers"],
        ["--data-parallel-size", "1"],  # an alias, of a flag consistency leaves alone
        ["--enable-metrics-for-all-schedulers"],  # --enable-metrics is a prefix of it, not an alias
        ["--chunked-prefill-size", "64"],
    ],
)
def test_a_flag_consistency_does_not_own_still_passes(words: list[str]) -> None:
    deploy.check_extra_args(tuple(words))


def test_consistency_owns_every_flag_the_pd_plan_sets() -> None:
    """plan.build (the pd topology's decode/router plans) checks PLAN_FLAGS with pd-eval's messages: consistency's
    own check runs first and must cover all of them, or a consistency run would name pd-eval's options."""
    assert set(plan.PLAN_FLAGS) <= set(deploy.OWNED_FLAGS)


@pytest.mark.parametrize(
    ("table", "dests"),
    [
        (deploy.OWNED_FLAGS, SGLANG_FLAG_DESTS),
        (plan.PLAN_FLAGS, SGLANG_FLAG_DESTS),
        (deploy_vllm.OWNED_FLAGS, VLLM_FLAG_DESTS),
        (deploy_vllm.SCENARIO_FLAGS, VLLM_FLAG_DESTS),
        (deploy_vllm.OFFLOAD_FLAGS, VLLM_FLAG_DESTS),
    ],
    ids=["consistency", "pd-eval", "vllm", "vllm-prefix-cache", "vllm-offload"],
)
def test_every_owned_flag_is_a_flag_of_its_server(table: dict[str, str], dests: dict[str, str]) -> None:
    """An owning table that names a flag the server does not have would own nothing, silently."""
    assert set(table) <= set(dests)


# --- the resolver, vLLM ---


@pytest.mark.parametrize(("word", "flag"), vllm_words(deploy_vllm.OWNED_FLAGS))
def test_every_vllm_spelling_of_an_owned_flag_is_refused(word: str, flag: str) -> None:
    spelled = "--" + word[2:].replace("_", "-")
    dest = VLLM_FLAG_DESTS[flag]
    full = next(k for k in VLLM_SERVER_FLAGS if k.startswith(spelled) and VLLM_FLAG_DESTS[k] == dest)
    with pytest.raises(InputError) as caught:
        deploy_vllm.check_extra_args((word, *value(full, VLLM_FLAG_VALUES)))
    message = str(caught.value)
    assert message.startswith(f"{word} after -- is not allowed") and flag in message
    assert deploy_vllm.OWNED_FLAGS[flag] in message


@pytest.mark.parametrize(
    ("words", "reading"),
    [
        (["--served_model", "x"], "(vLLM reads it as --served-model-name, underscores as dashes and a unique prefix)"),
        (["--see", "1"], "(vLLM reads it as --seed, a unique prefix)"),
        (["--num-gpu-blocks", "9"], "(vLLM reads it as --num-gpu-blocks-override, a unique prefix)"),
        (["--load_format=dummy"], "(vLLM reads it as --load-format, underscores as dashes)"),
    ],
)
def test_vllm_abbreviations_read_as_vllm_reads_them(words: list[str], reading: str) -> None:
    with pytest.raises(InputError) as caught:
        deploy_vllm.check_extra_args(tuple(words))
    assert str(caught.value).startswith(f"{words[0].partition('=')[0]} after -- is not allowed {reading}: ")


@pytest.mark.parametrize(("word", "flag"), vllm_words(deploy_vllm.SCENARIO_FLAGS))
def test_every_spelling_of_a_prefix_cache_scenario_flag_is_refused(word: str, flag: str) -> None:
    with pytest.raises(InputError, match=r"is not allowed with --scenario prefix-cache"):
        deploy_vllm.check_extra_args((word,), deploy_vllm.SCENARIO_FLAGS, " with --scenario prefix-cache")


def test_a_vllm_inverse_is_named_as_one() -> None:
    """--disable-x, --no-enable-x and --enable-x store into one dest: the refusal names the owned spelling of the
    same sign where the table has one, else the flag and says the word is its inverse."""
    with pytest.raises(InputError) as caught:
        deploy_vllm.check_extra_args(("--disable-prefix-caching",), deploy_vllm.SCENARIO_FLAGS, " with X")
    assert "(vLLM reads it as --no-enable-prefix-caching, its alias)" in str(caught.value)
    with pytest.raises(InputError) as caught:
        deploy_vllm.check_extra_args(("--disable-prefix-cach",), {"--enable-prefix-caching": "why"})
    reading = "(vLLM reads it as --enable-prefix-caching, a unique prefix of its inverse --disable-prefix-caching)"
    assert reading in str(caught.value)


@pytest.mark.parametrize("words", [["--max-num-batched-tokens", "64"], ["--gpu-memory-utilization", "0.5"]])
def test_a_flag_vllm_consistency_does_not_own_still_passes(words: list[str]) -> None:
    deploy_vllm.check_extra_args(tuple(words))


def test_a_positional_after_the_separator_is_named_as_vllms_model_tag() -> None:
    with pytest.raises(InputError, match="model_tag, and kvdoctor sets the model"):
        deploy_vllm.check_extra_args(("/elsewhere/other-model",))


# --- the command: --dry-run refuses before any work, naming consistency's own terms ---


def consistency(tmp_path: Path, *args: str) -> tuple[int, list[str]]:
    out = tmp_path / "out"
    got = CliRunner().invoke(app, ["consistency", "llama-3.1-8b", "--shrink", "--output-dir", str(out), *args])
    assert not out.exists()  # nothing written: no run directory, no checkpoint
    return got.exit_code, [line for line in got.output.splitlines() if line.strip()]


@pytest.mark.parametrize("topology", ["single", "pd"])
@pytest.mark.parametrize("words", [["--model", "/elsewhere/m"], ["--model-p", "/elsewhere/m"], ["--model=/x"]])
def test_the_model_cannot_be_swapped_after_the_separator(tmp_path: Path, topology: str, words: list[str]) -> None:
    code, lines = consistency(tmp_path, "--topology", topology, "--dry-run", "--", *words)
    assert code == 2 and len(lines) == 1, lines
    typed = words[0].partition("=")[0]
    assert lines[0].startswith(f"kvdoctor: error: {typed} after -- is not allowed (SGLang reads it as --model-path")


def test_the_model_cannot_be_swapped_on_vllm_either(tmp_path: Path) -> None:
    code, lines = consistency(tmp_path, "--server", "vllm", "--dry-run", "--", "--served_model_name", "x")
    assert code == 2 and len(lines) == 1, lines
    assert "--served_model_name after -- is not allowed (vLLM reads it as --served-model-name" in lines[0]


@pytest.mark.parametrize("topology", ["single", "pd"])
@pytest.mark.parametrize(
    ("words", "said"),
    [
        (["--port", "30000"], "kvdoctor picks a free port for every server"),
        (["--host", "0.0.0.0"], "kvdoctor binds every server to 127.0.0.1"),
        (["--tp", "2"], "consistency runs every server at TP 1"),
        (["--tensor-parallel-size", "2"], "consistency runs every server at TP 1"),
        (["--base-gpu-id", "1"], "consistency places every server itself"),
        (["--disaggregation-bootstrap-port", "9000"], "kvdoctor picks a free bootstrap port"),
        (["--disaggregation-mode", "decode"], "--topology pd sets prefill and decode itself"),
        (["--disaggregation-transfer-backend", "nixl"], "kvdoctor picks mooncake"),
        (["--config", "my.yaml"], "a config file may set a flag kvdoctor owns"),
    ],
)
def test_refusals_name_consistencys_own_terms(tmp_path: Path, topology: str, words: list[str], said: str) -> None:
    """Defect 12: these once said "use kvdoctor's --prefill-port / --decode-port", "--bootstrap-port", "--tp":
    pd-eval's options, which consistency does not have."""
    code, lines = consistency(tmp_path, "--topology", topology, "--dry-run", "--", *words)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"kvdoctor: error: {words[0]} after -- is not allowed") and said in lines[0]
    assert not any(other in lines[0] for other in PD_EVAL_ONLY), lines[0]


@pytest.mark.parametrize(
    ("words", "said"),
    [
        (["--host", "0.0.0.0"], "kvdoctor binds both servers to 127.0.0.1"),
        (["--por", "1"], "kvdoctor picks free ports"),
        (["--config", "my.yaml"], "a config file may set a flag kvdoctor owns"),
    ],
)
def test_vllm_refusals_name_consistencys_own_terms(tmp_path: Path, words: list[str], said: str) -> None:
    """--host once said "kvdoctor's --host": consistency has no --host option."""
    code, lines = consistency(tmp_path, "--server", "vllm", "--dry-run", "--", *words)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"kvdoctor: error: {words[0]} after -- is not allowed") and said in lines[0]
    assert "kvdoctor's --" not in lines[0] and not any(other in lines[0] for other in PD_EVAL_ONLY), lines[0]


def test_bench_consistency_refuses_the_swap_before_any_work(tmp_path: Path) -> None:
    """bench consistency has no --dry-run: the refusal comes before the run directory, checkpoint or launch."""
    out = tmp_path / "out"
    got = CliRunner().invoke(
        app, ["bench", "consistency", "llama-3.1-8b", "--shrink", "--output-dir", str(out), "--", "--model", "/x"]
    )
    lines = [line for line in got.output.splitlines() if line.strip()]
    assert got.exit_code == 2 and len(lines) == 1, lines
    assert "--model after -- is not allowed (SGLang reads it as --model-path, its alias)" in lines[0]
    assert not out.exists()


@pytest.mark.server
def test_the_real_server_envs_kvdoctor_refuses_the_swap(tmp_path: Path) -> None:
    """Run with .venv-server's kvdoctor (real SGLang 0.5.23 installed): the refusal is before any launch, so no
    server is needed to prove it; the flag table it resolves with is the one its SGLang's parser holds
    (tests/engines/sglang/test_sglang_owned_flags.py)."""
    out = tmp_path / "out"
    # --dry-run: the refusal comes first either way, and a regression prints a plan instead of launching servers
    args = ["consistency", "llama-3.1-8b", "--shrink", "--topology", "pd", "--dry-run", "--output-dir", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "kvdoctor", *args, "--", "--model", str(ROOT / "fixtures")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("kvdoctor: error: --model after -- is not allowed (SGLang reads it as --model-path")
    assert not out.exists()
