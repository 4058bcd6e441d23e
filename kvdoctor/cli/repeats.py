"""A kvdoctor option that takes one value, given twice, is refused before anything runs.

Why: click keeps the last of a repeated single-valued option and says nothing, so
``roundtrip --inject missing-mamba --inject stale-scales`` would inject only the second fault and
report on it as if that were what was asked. A repeat is always a mistake worth a line: exit 2,
naming the option and every value given. The check reads the raw command line against the command's
own click parameters, so it holds for every command at once:

- options declared repeatable (``multiple=True``: ``drift --fixture``) are left alone;
- flags repeated the same way (``--json --json``) mean one thing and pass; an on/off pair given both
  ways (``--mini-lb --no-mini-lb``) contradicts itself and is refused;
- server flags passed through to SGLang or vLLM (not kvdoctor's parameters) and everything after
  ``--`` are not kvdoctor's to judge (``kvdoctor.cli.server_args`` checks those).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvdoctor._exceptions import InputError
from kvdoctor.text import shown


def _options(command: Any) -> dict[str, Any]:
    """Every spelling of COMMAND's options (``--x``, ``-x``, ``--no-x``) to its click parameter."""
    names: dict[str, Any] = {}
    for param in getattr(command, "params", ()):
        if getattr(param, "param_type_name", "") != "option":
            continue
        for name in (*param.opts, *param.secondary_opts):
            names[name] = param
    return names


def _takes_value(param: Any) -> bool:
    return not (getattr(param, "is_flag", False) or getattr(param, "count", False))


def _match(token: str, names: dict[str, Any]) -> tuple[Any, str, str | None] | None:
    """(param, spelling, attached value) when TOKEN is one of NAMES' options, else None."""
    if token in names:
        return names[token], token, None
    if token.startswith("--") and "=" in token:
        name, value = token.split("=", 1)
        if name in names:
            return names[name], name, value
    elif token.startswith("-") and not token.startswith("--") and len(token) > 2 and token[:2] in names:
        param = names[token[:2]]
        if _takes_value(param):
            return param, token[:2], token[2:]
    return None


def _scan(command: Any, tokens: Sequence[str], start: int, *, stop_at_positional: bool) -> tuple[dict, int]:
    """Occurrences of COMMAND's options in TOKENS from START: {param name: [(spelling, value)]}, and the
    index where the scan stopped (a group stops at its first positional: the subcommand)."""
    names = _options(command)
    seen: dict[str, list[tuple[str, str | None]]] = {}
    i = start
    while i < len(tokens):
        token = tokens[i]
        if token == "--":
            return seen, len(tokens)
        hit = _match(token, names)
        if hit is None:
            if stop_at_positional and not token.startswith("-"):
                return seen, i
            i += 1
            continue
        param, spelling, value = hit
        i += 1
        if _takes_value(param) and value is None:
            nargs = max(int(getattr(param, "nargs", 1) or 1), 1)
            value = " ".join(tokens[i : i + nargs])
            i += nargs
        if not getattr(param, "multiple", False):
            seen.setdefault(param.name, []).append((spelling, value))
    return seen, i


def _refuse(seen: dict[str, list[tuple[str, str | None]]], command_path: str) -> None:
    for uses in seen.values():
        if len(uses) < 2:
            continue
        spelling = uses[0][0]
        hint = f" (see '{command_path} -h')"
        if all(value is None for _, value in uses):  # a flag: only an on/off pair given both ways contradicts
            spellings = sorted({s for s, _ in uses})
            if len(spellings) > 1:
                raise InputError(f"{' and '.join(spellings)} contradict each other: give one of them{hint}")
            continue
        values = ", ".join(shown(value, 80) for _, value in uses)
        raise InputError(
            f"{spelling} was given {len(uses)} times ({values}) but takes one value per run; "
            f"kvdoctor would silently keep only the last: give it once{hint}"
        )


def refuse_repeated(root: Any, argv: Sequence[str], prog_name: str = "kvdoctor") -> None:
    """Raise ``InputError`` when ARGV repeats a single-valued option of the command it runs (from ROOT)."""
    command, path, i = root, [prog_name], 0
    while hasattr(command, "commands"):  # a group: its own options, then the subcommand's name
        seen, i = _scan(command, argv, i, stop_at_positional=True)
        _refuse(seen, " ".join(path))
        if i >= len(argv):
            return
        sub = command.commands.get(argv[i])
        if sub is None:  # an unknown command: click says so
            return
        command, path, i = sub, [*path, argv[i]], i + 1
    seen, _ = _scan(command, argv, i, stop_at_positional=False)
    _refuse(seen, " ".join(path))
