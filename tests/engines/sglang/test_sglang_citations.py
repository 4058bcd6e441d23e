"""Every citation in ``kvdoctor/core/sglang/rules/`` and ``kvdoctor/consistency/`` points at its symbol in the
installed SGLang.

The rules package restates SGLang's rules and cites each one as ``cite(path, symbol, start, end)``. This
parses those calls out of its modules' source (so a citation cannot hide from the check), opens every
cited range in the installed SGLang's files, and checks the named symbol (a name, or a message
fragment) appears within the cited lines. It needs SGLang's files, not SGLang itself: nothing is
imported from it.

``consistency/`` (every module, its server folders too) cites SGLang two ways: ``Cite("sglang", path, symbol,
start, end)`` objects (the state trace's findings, the runnable-model refusals), parsed from its syntax trees the
same way; and ``path:lines`` in prose (docstrings, refusal messages, enabler reasons: the text a user reads), found
by :data:`SGLANG_PROSE`. A prose citation names no symbol the parser can trust, so :data:`PROSE_SYMBOLS` says what
each cited range must show; a prose citation missing from it is red (say what its lines show), so none escapes.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from functools import cache
from pathlib import Path

import pytest

import kvdoctor.consistency
from kvdoctor.core.sglang import rules

pytestmark = pytest.mark.sglang

RULES_FILES = sorted(Path(rules.__file__).parent.glob("*.py"))
CONSISTENCY_FILES = sorted(Path(kvdoctor.consistency.__file__).parent.rglob("*.py"))
# A path:lines in prose whose first folder is one of the installed SGLang package's own (``sglang/<folder>/``):
# SGLang's. vLLM's (``v1/...``, ``config/vllm.py``, ``entrypoints/...``) start with none of these.
SGLANG_PROSE = re.compile(
    r"(?<![\w/.])((?:srt|kernels|lang|multimodal_gen|cli|api|benchmark|test)/[\w/]+\.py):(\d+)(?:-(\d+))?"
)
# What each prose citation's lines show (a name, or a fragment of the text there), by "path:lines".
PROSE_SYMBOLS = {
    "srt/entrypoints/http_server.py:1027-1040": "flush_cache(timeout_s=timeout)",
    "srt/disaggregation/mooncake/conn.py:1943": "def maybe_send_extra",
    "srt/environ.py:730": "SGLANG_SWA_EVICTION_INTERVAL",
    "srt/managers/schedule_batch.py:4063-4066": "sliding_window_size",
    "srt/managers/schedule_policy.py:787": "ignore_eos",
    "srt/configs/model_config.py:1291-1329": "_derive_context_length",
    "srt/configs/model_config.py:1291-1316": "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN",
    "srt/utils/hf_transformers/common.py:677-694": "get_context_length",
    "srt/managers/tokenizer_manager.py:1337-1377": "max_new_tokens + input_token_num",
    "srt/managers/tp_worker.py:568-572": "max_req_len",
    "srt/managers/scheduler.py:2693-2716": "init_req_max_new_tokens",
    "srt/managers/utils.py:259-287": "validate_input_length",
    "srt/managers/utils.py:484": "compute_num_reserved_tokens",
    "srt/utils/common.py:221-224": "SGLANG_USE_CPU_ENGINE",
    "srt/arg_groups/platform_hook.py:158-172": "intel_amx",
    "srt/mem_cache/pool_host/common.py:147": "cudart",
    "srt/disaggregation/prefill.py:1495-1497": "torch.cuda.Event",
    "srt/disaggregation/prefill.py:1746-1761": "supports_host_tensor_indices",
    "srt/managers/schedule_batch.py:2375-2386": "backup_kv_cache",
    "srt/utils/server_args_config_parser.py:75-105": "merge_config_with_args",
    "kernels/ops/kvcache/cache_move.py:9-10": "sgl_kernel",
}
# A file:line written as prose rather than cited (``memory_pool.py:2010``) would escape the check.
PROSE_CITATION = re.compile(r"[\w/]+\.py:\d+")


def _parsed_citations() -> list[tuple[str, str, int, int]]:
    """(path, symbol, start, end) of every ``cite(...)`` call in the rules package, read from its syntax trees."""
    found = []
    nodes = (node for file in RULES_FILES for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))))
    for node in nodes:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "cite":
            args = [ast.literal_eval(a) for a in node.args]
            assert not node.keywords and 3 <= len(args) <= 4, f"line {node.lineno}: cite() takes literal arguments"
            path, symbol, start, *end = args
            found.append((path, symbol, start, end[0] if end else start))
    return found


CITED = _parsed_citations()


def _is_cite(func: ast.expr) -> bool:
    return (isinstance(func, ast.Name) and func.id == "Cite") or (
        isinstance(func, ast.Attribute) and func.attr == "Cite"
    )


def _consistency_cites() -> list[tuple[str, str, int, int, str]]:
    """(path, symbol, start, end, file:line) of every ``Cite("sglang", ...)`` in ``consistency/``."""
    found = []
    for file in CONSISTENCY_FILES:
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and _is_cite(node.func)):
                continue
            where = f"{file.name}:{node.lineno}"
            assert not node.keywords and len(node.args) == 5, f"{where}: Cite() takes five literal arguments"
            server, path, symbol, start, end = (ast.literal_eval(a) for a in node.args)
            if server == "sglang":
                found.append((path, symbol, start, end, where))
    return found


def _consistency_prose() -> list[tuple[str, int, int, str]]:
    """(path, start, end, file:line) of every SGLang ``path:lines`` written in ``consistency/``'s text."""
    found = []
    for file in CONSISTENCY_FILES:
        for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
            for m in SGLANG_PROSE.finditer(line):
                start = int(m.group(2))
                found.append((m.group(1), start, int(m.group(3) or start), f"{file.name}:{n}"))
    return found


# Citations this check found wrong in files it may not change in the same change (a refusal's text is output):
# strict, so the fix turns the xfail red and its entry is removed with it. None today.
KNOWN_WRONG: dict[tuple[str, int], str] = {}
CONSISTENCY_CITED = _consistency_cites()
CONSISTENCY_PROSE = _consistency_prose()


def _key(path: str, start: int, end: int) -> str:
    return f"{path}:{start}" if start == end else f"{path}:{start}-{end}"


@cache
def _sglang_root() -> Path:
    spec = importlib.util.find_spec("sglang")  # locates the package without importing it
    assert spec is not None and spec.origin, "SGLang is not installed here"
    return Path(spec.origin).parent


@cache
def _lines(path: str) -> list[str]:
    file = _sglang_root() / path
    assert file.is_file(), f"{path}: no such file in the installed SGLang ({_sglang_root()})"
    return file.read_text(encoding="utf-8").splitlines()


def _named(symbol: str, text: str) -> bool:
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", symbol):
        return re.search(rf"(?<![A-Za-z0-9_]){re.escape(symbol)}(?![A-Za-z0-9_])", text) is not None
    return symbol in text


def test_every_citation_is_parsed_and_registered() -> None:
    registered = [(c.path, c.symbol, c.start, c.end) for c in rules.CITATIONS]
    assert len(RULES_FILES) > 10 and CITED and sorted(CITED) == sorted(registered)


def test_rules_cite_only_through_cite() -> None:
    for file in RULES_FILES:
        prose = PROSE_CITATION.findall(file.read_text(encoding="utf-8"))
        assert prose == [], f"{file.name}: cite SGLang with cite(path, symbol, start, end), not prose"


def _check_range(path: str, symbol: str, start: int, end: int) -> None:
    lines = _lines(path)
    assert 1 <= start <= end <= len(lines), f"{path}:{start}-{end} is outside the file ({len(lines)} lines)"
    text = "\n".join(lines[start - 1 : end])
    assert _named(symbol, text), f"{path}:{start}-{end} does not name {symbol!r}:\n{text}"


@pytest.mark.parametrize(("path", "symbol", "start", "end"), CITED, ids=[f"{p}:{s}-{e}:{n}" for p, n, s, e in CITED])
def test_citation_names_its_symbol_in_the_installed_sglang(path: str, symbol: str, start: int, end: int) -> None:
    _check_range(path, symbol, start, end)


def test_consistency_citations_are_found() -> None:
    """The scan sees consistency's citations: the state trace's (``attribution``) and the context limit's."""
    cited = {w.split(":")[0] for *_, w in CONSISTENCY_CITED}
    prose = {w.split(":")[0] for *_, w in CONSISTENCY_PROSE}
    assert {"attribution.py", "runnable.py"} <= cited and "context_limit.py" in prose


@pytest.mark.parametrize(
    ("path", "symbol", "start", "end", "where"),
    [
        pytest.param(
            *c,
            id=f"{c[4]}:{c[0]}:{c[2]}-{c[3]}",
            marks=[pytest.mark.xfail(strict=True, reason=KNOWN_WRONG[c[0], c[2]])]
            if (c[0], c[2]) in KNOWN_WRONG
            else [],
        )
        for c in CONSISTENCY_CITED
    ],
)
def test_consistency_cite_names_its_symbol_in_the_installed_sglang(
    path: str, symbol: str, start: int, end: int, where: str
) -> None:
    _check_range(path, symbol, start, end)


@pytest.mark.parametrize(
    ("path", "start", "end", "where"), CONSISTENCY_PROSE, ids=[f"{w}:{p}:{s}-{e}" for p, s, e, w in CONSISTENCY_PROSE]
)
def test_consistency_prose_citation_shows_what_it_says_in_the_installed_sglang(
    path: str, start: int, end: int, where: str
) -> None:
    key = _key(path, start, end)
    assert key in PROSE_SYMBOLS, f"{where}: {key} is not in PROSE_SYMBOLS (add what its lines show)"
    _check_range(path, PROSE_SYMBOLS[key], start, end)
