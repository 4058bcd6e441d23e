"""Literal tables as ``ruff format`` lays them out, shared by the generators that write kvdoctor's
value grammars and dest tables (``sglang-server-flags.py``, ``vllm-tables.py``): one layout, so both committed tables
regenerate byte for byte. Run from this folder (the generators import it as a sibling module)."""

from __future__ import annotations


def literal(value: object) -> object:
    """A parser's choice as the table stores it: plain scalars as they are, anything else as its str."""
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)


def lit(value: object) -> str:
    """VALUE as ruff formats a literal: strings in double quotes, tuples with their trailing comma."""
    import json

    if isinstance(value, tuple):
        inner = ", ".join(lit(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return json.dumps(value) if isinstance(value, str) else repr(value)


def values_lines(name: str, doc: list[str], table: dict[str, tuple[str, object, object]]) -> list[str]:
    """``NAME: dict[str, ValueGrammar] = {...}`` laid out as ``ruff format`` lays it out (line length 120)."""
    lines = [*(f"# {d}" for d in doc), f"{name}: dict[str, ValueGrammar] = {{"]
    for option in sorted(table):
        kind, nargs, choices = table[option]
        one = f"    {lit(option)}: ({lit(kind)}, {lit(nargs)}, {lit(choices)}),"
        if len(one) <= 120:
            lines.append(one)
            continue
        lines += [f"    {lit(option)}: (", f"        {lit(kind)},", f"        {lit(nargs)},"]
        inline = f"        {lit(choices)},"
        if len(inline) <= 120 or not isinstance(choices, tuple):
            lines.append(inline)
        else:
            lines += ["        (", *(f"            {lit(c)}," for c in choices), "        ),"]
        lines.append("    ),")
    return [*lines, "}"]


def dests_lines(name: str, doc: list[str], dests: dict[str, str], kind: str = "str") -> list[str]:
    """``NAME: dict[str, KIND] = {...}`` (option string -> its argparse dest, or dest -> its default), one entry a
    line, sorted."""
    lines = [*(f"# {d}" for d in doc), f"{name}: dict[str, {kind}] = {{"]
    for option in sorted(dests):
        one = f"    {lit(option)}: {lit(dests[option])},"
        lines += [one] if len(one) <= 120 else [f"    {lit(option)}: (", f"        {lit(dests[option])}", "    ),"]
    return [*lines, "}"]


def scalar_defaults(defaults: dict[str, object]) -> dict[str, object]:
    """DEFAULTS (dest -> the parser's default) with the scalar ones kept (str, int, float, bool, None): a list or an
    object default is left out rather than written as its str."""
    plain = (str, int, float, bool)
    return {d: v for d, v in defaults.items() if v is None or (type(v) in plain)}  # an IntEnum is an int, not plain
