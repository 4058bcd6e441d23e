"""The owned-flag resolver held to the installed vLLM's own parser (issue 28, defect 2).

``consistency --server vllm`` refuses a word after ``--`` that vLLM reads as a flag it sets, by the dest in
``VLLM_FLAG_DESTS`` and by the vocabulary's reading (underscores as dashes, then a unique prefix). Here vLLM's
parser answers: the api_server entry kvdoctor launches builds a ``FlexibleArgumentParser`` with ``allow_abbrev``
on (so ``core/vllm/flags.py``'s ``VLLM`` takes abbreviations), every word kvdoctor refuses lands in the owned
dest, and a word it lets through lands in none. Runs in .venv-vllm (``make test-vllm``).
"""

from __future__ import annotations

from typing import Any

import pytest

from kvdoctor._exceptions import InputError
from kvdoctor.consistency.servers.vllm import plan as deploy_vllm
from kvdoctor.core.vllm._generated.server_flags import VLLM_FLAG_DESTS, VLLM_FLAG_VALUES
from kvdoctor.core.vllm.flags import VLLM
from tests.consistency.test_owned_flags import value, vllm_words

pytestmark = pytest.mark.vllm

UNSET = object()
TABLES = {
    "owned": deploy_vllm.OWNED_FLAGS,
    "prefix-cache": deploy_vllm.SCENARIO_FLAGS,
    "offload": deploy_vllm.OFFLOAD_FLAGS,
}


def live_parser() -> Any:
    """The api_server entry's parser (entrypoints/launchers/api_server/entry.py:218-221), defaults unset."""
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(description="vLLM OpenAI-Compatible RESTful API server."))
    parser.set_defaults(**{a.dest: UNSET for a in parser._actions if a.dest not in ("help", "model_tag")})
    return parser


def test_the_dest_table_is_vllms_parser() -> None:
    actions = live_parser()._option_string_actions.items()
    assert {o: a.dest for o, a in actions if o not in ("-h", "--help")} == VLLM_FLAG_DESTS


def test_the_launched_parser_takes_abbreviations() -> None:
    """``python -m vllm.entrypoints.openai.api_server`` runs ``entry.main``: a plain ``FlexibleArgumentParser``,
    ``allow_abbrev`` left on (read from the source: the module imports uvicorn, which this env lacks)."""
    import ast
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.origin is not None
    path = Path(spec.origin).parent / "entrypoints" / "launchers" / "api_server" / "entry.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    source = ast.get_source_segment(path.read_text(encoding="utf-8"), main) or ""
    assert "FlexibleArgumentParser(" in source and "make_arg_parser(parser)" in source
    assert "allow_abbrev" not in source
    assert live_parser().allow_abbrev is True and VLLM.abbreviations


@pytest.mark.parametrize(
    ("word", "flag", "table"),
    [(w, f, name) for name, table in TABLES.items() for w, f in vllm_words(table) if not w.startswith("--conf")],
)
def test_every_word_kvdoctor_refuses_lands_in_the_owned_dest(word: str, flag: str, table: str) -> None:
    """(``--config`` is left out: vLLM's parser reads the file before argparse sees it.)"""
    dest = VLLM_FLAG_DESTS[flag]
    spelled = "--" + word[2:].replace("_", "-")
    full = next(k for k in VLLM_FLAG_DESTS if k.startswith(spelled) and VLLM_FLAG_DESTS[k] == dest)
    values = value(full, VLLM_FLAG_VALUES)
    ns = live_parser().parse_args([word, *values])
    assert getattr(ns, dest) is not UNSET
    with pytest.raises(InputError, match="after -- is not allowed"):
        deploy_vllm.check_extra_args((word, *values), TABLES[table])


@pytest.mark.parametrize("words", [["--max-num-batched-tokens", "64"], ["--gpu-memory-utilization", "0.5"]])
def test_a_word_kvdoctor_lets_through_sets_no_owned_dest(words: list[str]) -> None:
    deploy_vllm.check_extra_args(tuple(words))
    ns = live_parser().parse_args(words)
    owned = {VLLM_FLAG_DESTS[f] for table in TABLES.values() for f in table}
    assert all(getattr(ns, dest) is UNSET for dest in owned)
