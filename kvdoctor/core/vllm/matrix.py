"""``kvdoctor drift --server vllm``'s matrix: which bundled fixtures and which ``vllm serve`` lines it runs.

Pure (no torch, no vLLM). The fixtures are the bundled ones the vLLM rule model accepts (what
``inspect --server vllm`` answers for, :func:`vllm_fixtures`). The launch lines are the product of the
flags that change what vLLM groups, sizes and moves: tensor parallel 1/2, a KV cache dtype (auto, fp8),
the native offloading connector off/on, prefix caching on/off and, for a model with Mamba layers, each
``--mamba-cache-mode``; beside the product, three ``--max-model-len`` lines (below, ``auto``, above), and for a
model without MLA each per-token-head KV dtype (fp32 scales inside the page) alone and with the offloading connector.
Every flag name and every choice is read from kvdoctor's generated vLLM flag table
(``_generated/server_flags.py``) or the rule model's dtype table, never spelled here a second time as a
value list, so a vLLM whose flags moved fails here (``MatrixError``) rather than running a stale line.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from kvdoctor._exceptions import InputError, InternalError
from kvdoctor.core.config import bundled_fixtures, load_config
from kvdoctor.core.flag_values import CONVERTERS
from kvdoctor.core.record import record
from kvdoctor.core.vllm import rules
from kvdoctor.core.vllm._generated.server_flags import VLLM_FLAG_VALUES, VLLM_SERVER_FLAGS, VLLM_SWITCHES
from kvdoctor.core.vllm.analysis import analyze_vllm
from kvdoctor.core.vllm.flags import BOOLEAN_SPELLINGS
from kvdoctor.core.vllm.specs import classify

__all__ = ["LaunchCase", "MatrixError", "case_names", "cases_for", "cases_of", "token_head_cases", "vllm_fixtures"]

TP = "--tensor-parallel-size"
TP_WIDTHS = (1, 2)  # one GPU, and the smallest split (the head-count refusals start there)
KV_DTYPE = "--kv-cache-dtype"
KV_DTYPES = ("auto", "fp8")  # the default and the one-byte KV (rules.KV_DTYPE_BYTES names both)
OFFLOAD_SIZE = "--kv-offloading-size"
OFFLOAD_GIB = "8"
OFFLOAD_BACKEND = "--kv-offloading-backend"
OFFLOAD_NATIVE = "native"  # the OffloadingConnector (flags.VllmFlags.transfer)
PREFIX_ON = "--enable-prefix-caching"
PREFIX_OFF = "--no-enable-prefix-caching"
MAMBA_MODE = "--mamba-cache-mode"
MAX_LEN = "--max-model-len"
# Beside the product: --max-model-len below every fixture's length (decimal spelling: 3000, on no block
# boundary), auto (the derived length, asked), and above every fixture's length (both sides refuse), each
# without prefix caching where the Mamba block is max_model_len.
MAX_LEN_CASES = (("max-len-3k", "3k", True), ("max-len-auto", "auto", True), ("max-len-10M", "10M", False))
BASE = "base"  # the case every other one differs from
# Beside the product, on models without MLA (no MLA backend lists them): every per-token-head KV dtype the rule model
# knows (rules.PER_TOKEN_HEAD), with prefix caching, alone and with the native offloading connector.
TOKEN_HEAD_DTYPES = tuple(rules.PER_TOKEN_HEAD)
# Families whose layers include a MambaSpec (specs._layer_kinds): the mamba cache mode applies to them.
MAMBA_FAMILIES = rules.MAMBA_FAMILIES


class MatrixError(InternalError):
    """The matrix names a flag or a value the generated vLLM flag table does not have: a kvdoctor bug."""


@record(frozen=True)
class LaunchCase:
    """One launch line of the matrix: its name (``tp2+fp8+offload+no-prefix``) and its vLLM flags."""

    name: str
    argv: tuple[str, ...]


def _flag(name: str) -> str:
    if name not in VLLM_SERVER_FLAGS:
        raise MatrixError(f"drift matrix: {name} is not a vLLM {rules.RULES_REVISION} server flag")
    return name


def _choice(flag: str, value: str) -> str:
    choices = VLLM_FLAG_VALUES[_flag(flag)][2]
    if choices is not None and value not in choices:
        raise MatrixError(f"drift matrix: {flag} {value} is not one of vLLM's choices ({', '.join(choices)})")
    return value


def _switch(flag: str, field: str, value: bool) -> str:
    if flag not in VLLM_SWITCHES or BOOLEAN_SPELLINGS.get(flag) != (field, value):
        raise MatrixError(f"drift matrix: {flag} does not set {field}={value} in vLLM {rules.RULES_REVISION}")
    return flag


def mamba_modes() -> tuple[str, ...]:
    """``--mamba-cache-mode``'s choices, from the generated flag table."""
    choices = VLLM_FLAG_VALUES[_flag(MAMBA_MODE)][2]
    if not choices:
        raise MatrixError(f"drift matrix: {MAMBA_MODE} has no choices in the generated flag table")
    return tuple(choices)


def _axes(mamba: bool) -> list[list[tuple[str, tuple[str, ...]]]]:
    """Each axis: (name part, flags) per value; an empty part is the default value (no flag)."""
    for dtype in KV_DTYPES:
        if dtype not in rules.KV_DTYPE_BYTES:
            raise MatrixError(f"drift matrix: {KV_DTYPE} {dtype} is not a dtype kvdoctor's vLLM rules model")
    axes = [
        [("" if tp == 1 else f"tp{tp}", () if tp == 1 else (_flag(TP), str(tp))) for tp in TP_WIDTHS],
        [("" if d == "auto" else d, () if d == "auto" else (_flag(KV_DTYPE), d)) for d in KV_DTYPES],
        [
            ("", ()),
            ("offload", (_flag(OFFLOAD_SIZE), OFFLOAD_GIB, OFFLOAD_BACKEND, _choice(OFFLOAD_BACKEND, OFFLOAD_NATIVE))),
        ],
        [  # both spelled out: the cell does not lean on either side's idea of vLLM's default
            ("", (_switch(PREFIX_ON, "enable_prefix_caching", True),)),
            ("no-prefix", (_switch(PREFIX_OFF, "enable_prefix_caching", False),)),
        ],
    ]
    if mamba:
        axes.append([("", ()), *((f"mamba-{m}", (_flag(MAMBA_MODE), _choice(MAMBA_MODE, m))) for m in mamba_modes())])
    return axes


def _length(value: str) -> str:
    """VALUE, once the generated flag table's grammar for --max-model-len accepts it (vLLM's own type)."""
    kind = VLLM_FLAG_VALUES[_flag(MAX_LEN)][0]
    try:
        CONVERTERS[kind][0](value)
    except (KeyError, ValueError) as exc:
        raise MatrixError(f"drift matrix: {MAX_LEN} {value} is not a value vLLM's parser takes ({exc})") from None
    return value


def _length_cases() -> list[LaunchCase]:
    cases = []
    for name, value, no_prefix in MAX_LEN_CASES:
        part, switch = ("no-prefix", PREFIX_OFF) if no_prefix else ("", PREFIX_ON)
        flag = _switch(switch, "enable_prefix_caching", not no_prefix)
        cases.append(LaunchCase("+".join(p for p in (name, part) if p), (flag, _flag(MAX_LEN), _length(value))))
    return cases


def cases_for(mamba: bool) -> tuple[LaunchCase, ...]:
    """Every launch line for a model with (MAMBA) or without Mamba layers: the product of the axes, then the
    ``--max-model-len`` cases (``MAX_LEN_CASES``).

    A case is named by what differs from ``base`` (TP 1, ``--kv-cache-dtype auto``, no connector,
    ``--enable-prefix-caching``, no ``--mamba-cache-mode``): ``tp2+fp8+offload+no-prefix+mamba-align``.
    """
    cases = []
    for combo in itertools.product(*_axes(mamba)):
        name = "+".join(part for part, _ in combo if part) or BASE
        cases.append(LaunchCase(name, tuple(w for _, argv in combo for w in argv)))
    return (*cases, *_length_cases())


def token_head_cases() -> tuple[LaunchCase, ...]:
    """The per-token-head lines (TOKEN_HEAD_DTYPES), each alone and with the offloading connector
    (``int8_per_token_head``, ``int8_per_token_head+offload``)."""
    offload = (_flag(OFFLOAD_SIZE), OFFLOAD_GIB, _flag(OFFLOAD_BACKEND), _choice(OFFLOAD_BACKEND, OFFLOAD_NATIVE))
    prefix = _switch(PREFIX_ON, "enable_prefix_caching", True)
    cases = []
    for dtype in TOKEN_HEAD_DTYPES:
        if dtype not in rules.KV_DTYPE_BYTES:
            raise MatrixError(f"drift matrix: {KV_DTYPE} {dtype} is not a dtype kvdoctor's vLLM rules model")
        line = (_flag(KV_DTYPE), _choice(KV_DTYPE, dtype), prefix)
        cases += [LaunchCase(dtype, line), LaunchCase(f"{dtype}+offload", (*line, *offload))]
    return tuple(cases)


def cases_of(model: str) -> tuple[LaunchCase, ...]:
    """Every launch line drift runs for MODEL: :func:`cases_for` its layers, then the per-token-head lines unless
    its attention is MLA."""
    family = classify(load_config(model))
    extra = () if family is rules.Family.MLA else token_head_cases()
    return (*cases_for(family in MAMBA_FAMILIES), *extra)


def case_names() -> tuple[str, ...]:
    """Every case name any fixture can run (a model with Mamba layers and without MLA runs all of them)."""
    return tuple(c.name for c in (*cases_for(True), *token_head_cases()))


def has_mamba(model: str) -> bool:
    """Whether MODEL (a fixture the vLLM rules model) has Mamba layers: the mamba cache modes apply."""
    return classify(load_config(model)) in MAMBA_FAMILIES


def vllm_fixtures() -> list[str]:
    """The bundled fixtures ``inspect --server vllm`` answers for (the vLLM rule model analyses them under
    vLLM's defaults without refusing the input), sorted."""
    found = []
    for name in sorted(bundled_fixtures()):
        try:
            analyze_vllm(name, ())
        except InputError:  # vLLM does not serve it, kvdoctor's vLLM rules do not model it, or a field is missing
            continue
        found.append(name)
    return found


def select(names: Sequence[str], known: Sequence[str], what: str) -> list[str]:
    """NAMES (all of KNOWN when empty); exit 2 naming the unknown ones and the choices."""
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InputError(f"unknown {what} {', '.join(unknown)}; choose from {', '.join(known)}")
    return list(dict.fromkeys(names)) or list(known)


def select_fixtures(names: Sequence[str]) -> list[str]:
    """The vLLM fixtures NAMES (all when empty); exit 2 on a name that is not one, saying why for a
    bundled fixture the vLLM rule model does not answer for (``inspect --server vllm``'s own refusal)."""
    known = vllm_fixtures()
    bundled = bundled_fixtures()
    for name in names:
        if name in bundled and name not in known:
            try:
                analyze_vllm(name, ())
            except InputError as exc:
                raise InputError(f"--fixture {name} is not a vLLM fixture: {exc}") from None
    return select(names, known, "vLLM fixture")
