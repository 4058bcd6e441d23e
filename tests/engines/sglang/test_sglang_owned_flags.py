"""The owned-flag resolver held to the installed SGLang's own parser (issue 28, defect 2).

kvdoctor refuses a word after ``--`` that SGLang reads as a flag consistency or pd-eval sets, by the dest in
``SGLANG_FLAG_DESTS`` and by :meth:`FlagVocabulary.resolve`'s prefix rule. Both are claims about SGLang's
parser; here that parser (``ServerArgs.add_cli_args`` on argparse, as ``prepare_server_args`` builds it,
``srt/server_args.py:679``) answers them: the table is its option strings and dests, its abbreviations are on,
every word kvdoctor refuses really lands in the owned dest, and a word kvdoctor lets through lands in none.
Runs where SGLang is installed (.venv-sglang or .venv-server).
"""

from __future__ import annotations

import argparse
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from kvdoctor._exceptions import InputError
from kvdoctor.consistency import deploy
from kvdoctor.core.sglang._generated.server_flags import SGLANG_FLAG_DESTS, SGLANG_FLAG_VALUES
from kvdoctor.deploy import plan
from tests.consistency.test_owned_flags import sglang_words, value
from tests.pd.test_owned_flags import plan_words

pytestmark = pytest.mark.sglang

ROOT = Path(__file__).resolve().parents[3]

UNSET = object()


def live_parser() -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    parser.set_defaults(**{a.dest: UNSET for a in parser._actions if a.dest != "help"})
    return parser


def full_option(word: str, flag: str) -> str:
    return next(k for k in SGLANG_FLAG_DESTS if k.startswith(word) and SGLANG_FLAG_DESTS[k] == SGLANG_FLAG_DESTS[flag])


def test_the_dest_table_is_sglangs_parser() -> None:
    parser = live_parser()
    live = {o: a.dest for o, a in parser._option_string_actions.items() if a.dest != "help"}
    assert live == SGLANG_FLAG_DESTS


def test_the_generator_writes_the_committed_table_from_this_sglang() -> None:
    """tests/core/sglang/test_flags.py checks the same against .venv-sglang only; here, any env with SGLang."""
    import sglang

    source = Path(sglang.__file__).parent
    script = ROOT / "scripts" / "sglang-server-flags.py"
    out = subprocess.run([sys.executable, str(script), str(source)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    committed = ROOT / "kvdoctor" / "core" / "sglang" / "_generated" / "server_flags.py"
    assert out.stdout == committed.read_text(encoding="utf-8")


def test_the_server_parser_takes_abbreviations() -> None:
    """What kvdoctor launches (``python -m sglang.launch_server``) parses with ``prepare_server_args``'s plain
    ``argparse.ArgumentParser``: ``allow_abbrev`` left at its default, on."""
    from sglang.srt.server_args import prepare_server_args

    source = inspect.getsource(prepare_server_args)
    assert 'argparse.ArgumentParser(prog="sglang serve")' in source and "allow_abbrev" not in source
    assert live_parser().allow_abbrev is True


@pytest.mark.parametrize(
    ("word", "flag", "check"),
    [(w, f, "consistency") for w, f in sglang_words()] + [(w, f, "pd-eval") for w, f in plan_words()],
)
def test_every_word_kvdoctor_refuses_lands_in_the_owned_dest(word: str, flag: str, check: str) -> None:
    values = value(full_option(word, flag), SGLANG_FLAG_VALUES)
    if flag == "--model-path":
        values = ["/elsewhere/other-model"]
    ns = live_parser().parse_args(["--model-path", "seeded", word, *values])
    dest = SGLANG_FLAG_DESTS[flag]
    assert getattr(ns, dest) is not UNSET
    if flag == "--model-path":
        assert ns.model_path == "/elsewhere/other-model"  # the swap the issue found
    with pytest.raises(InputError, match=r"after -- (is not allowed|would contradict the launch plan)"):
        (deploy.check_extra_args if check == "consistency" else plan.check_extra_args)((word, *values))


@pytest.mark.parametrize(
    "words",
    [
        ["--mem-fraction-static", "0.5"],
        ["--speculative-draft-model", "d"],
        ["--model-impl", "transformers"],
        ["--enable-metrics-for-all-schedulers"],
        ["--chunked-prefill-size", "64"],
    ],
)
def test_a_word_kvdoctor_lets_through_sets_no_owned_dest(words: list[str]) -> None:
    deploy.check_extra_args(tuple(words))
    ns = live_parser().parse_args(["--model-path", "seeded", *words])
    assert ns.model_path == "seeded"
    owned = {SGLANG_FLAG_DESTS[f] for f in (*deploy.OWNED_FLAGS, *plan.PLAN_FLAGS)} - {"model_path"}
    assert all(getattr(ns, dest) is UNSET for dest in owned)
