"""Is a server flag's value one the server's own argparse accepts? The value grammar of every flag.

The generated flag tables (``sglang/_generated/server_flags.py``, ``vllm/_generated/server_flags.py``) record, for every
option string, what its ``argparse`` action converts the value with (its ``type``), how many values
it takes (``nargs``) and its ``choices``, read from the server's own parser. A value the server's
parser refuses (``--mem-fraction-static abc``, ``--max-model-len=abc``, a choice not offered) must not
pass here as "not modelled": it is refused the way argparse refuses it, one line, exit 2
(``FlagError``): ``argument --mem-fraction-static: invalid float value: 'abc'``.

The type kinds restated here are argparse's builtins (``int``, ``float``, ``str``), ``json.loads``,
and the few converters of the servers whose grammar is data (vLLM's ``optional_type``/``parse_type``
wrappers; both servers' ``human_readable_int``, cited below). Every other converter is a function
kvdoctor does not restate: the table names it ``custom:<name>`` and its values are not checked here
(such a flag is still listed as not modelled, KVD009/KVD109, so nothing claims it was checked).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import cache

from kvdoctor._exceptions import FlagError
from kvdoctor.core.record import record
from kvdoctor.text import shown

# (kind, nargs, choices): kind as below; nargs as argparse's (None: one value, 0: none, "?", "+", "*");
# choices: the values argparse compares the converted value with (None: any).
ValueGrammar = tuple[str, "int | str | None", "tuple[object, ...] | None"]

CUSTOM = "custom:"  # a converter kvdoctor does not restate: values pass unchecked (still "not modelled")
OPTIONAL = "optional:"  # vLLM's optional_type(T): "" and "None" mean None, anything else is T's
SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


# The grammars compile on first use: a launch line without such a value never pays for them (issue 17).
@cache
def sglang_human() -> re.Pattern[str]:
    """sglang/srt/utils/common.py:3394-3429 (human_readable_int): SI k M G T (decimals allowed) or IEC Ki Mi Gi Ti."""
    return re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)")


@cache
def _vllm_human() -> re.Pattern[str]:
    """vllm/utils/argparse_utils.py:30-74 (human_readable_int): k m g t decimal, K M G T binary (whole numbers)."""
    return re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")


class _Refused(ValueError):
    """The converter refused the value (argparse: ``invalid <type> value``, or its own message)."""


def _sglang_human_int(text: str) -> int:
    value = text.strip()
    match = sglang_human().fullmatch(value)
    if match is None:
        return int(value)
    number, suffix = match.groups()
    if suffix.endswith("i"):
        if "." in number:
            raise _Refused(f"Decimals are not allowed with IEC suffixes like '{suffix}'")
        return int(number) * IEC[suffix]
    from decimal import Decimal  # only a value with an SI suffix needs it

    return int(Decimal(number) * SI[suffix])


def _vllm_human_int(text: str) -> int:
    value = text.strip()
    match = _vllm_human().fullmatch(value)
    if match is None:
        return int(value)
    number, suffix = match.groups()
    if suffix.isupper():
        if "." in number:
            raise _Refused(f"Decimals are not allowed with binary suffixes like {suffix}")
        return int(number) * IEC[suffix + "i"]
    return int(float(number) * SI[suffix.upper() if suffix != "k" else suffix])


def _json_loads(text: str) -> object:
    """argparse's ``type=json.loads``; ``json`` is imported by the launch lines that give such a flag."""
    import json

    return json.loads(text)


def _vllm_human_int_or_auto(text: str) -> int:
    """vllm/utils/argparse_utils.py:77-94 (human_readable_int_or_auto): -1 or auto, else human_readable_int."""
    value = text.strip()
    return -1 if value == "-1" or value.lower() == "auto" else _vllm_human_int(value)


# kind -> (converter, the name argparse says in "invalid <name> value"). Each converter raises
# ValueError (argparse's "invalid ... value") or _Refused (the server's own message) on a bad value.
CONVERTERS: dict[str, tuple[Callable[[str], object], str]] = {
    "str": (str, "str"),
    "int": (int, "int"),
    "float": (float, "float"),
    "json": (_json_loads, "loads"),
    "sglang_human_int": (_sglang_human_int, "human_readable_int"),
    "vllm_human_int": (_vllm_human_int, "human_readable_int"),
    "vllm_human_int_or_auto": (_vllm_human_int_or_auto, "human_readable_int_or_auto"),
}


def _convert(kind: str, text: str) -> tuple[bool, object]:
    """(checked, the converted value); checked False for a converter kvdoctor does not restate."""
    if kind.startswith(OPTIONAL):
        if text in ("", "None"):
            return True, None
        kind = kind.removeprefix(OPTIONAL)
    if kind.startswith(CUSTOM) or kind not in CONVERTERS:
        return False, text  # a server function kvdoctor does not restate: not checked (see the module doc)
    return True, CONVERTERS[kind][0](text)


def _type_name(kind: str) -> str:
    base = kind.removeprefix(OPTIONAL)
    return CONVERTERS[base][1] if base in CONVERTERS else base


@record(frozen=True)
class ValueCheck:
    """Checks one option's values against its grammar, as the server's argparse does."""

    label: str  # "server flags", "vLLM flags"

    def check(self, name: str, values: Sequence[str], grammar: ValueGrammar | None) -> None:
        if grammar is None:
            return
        kind, nargs, choices = grammar
        if nargs == "+" and not values:
            raise FlagError(f"{self.label}: argument {name}: expected at least one argument")
        if nargs == 0:
            return
        for text in values:
            try:
                checked, value = _convert(kind, text)
            except _Refused as exc:
                raise FlagError(f"{self.label}: argument {name}: {shown(str(exc), 200)}") from None
            except (ValueError, TypeError, RecursionError):  # json.JSONDecodeError is a ValueError
                raise FlagError(
                    f"{self.label}: argument {name}: invalid {_type_name(kind)} value: {shown(text, 200)!r}"
                ) from None
            if checked and choices is not None and value not in choices:
                offered = ", ".join(repr(c) for c in choices)
                raise FlagError(
                    f"{self.label}: argument {name}: invalid choice: {shown(text, 200)!r} (choose from {offered})"
                )
