"""Regenerate kvdoctor/core/sglang/_generated/server_flags.py from SGLang's source and its own parser.

Usage: .venv-sglang/bin/python scripts/sglang-server-flags.py .venv-sglang/lib/python3.11/site-packages/sglang \
           > kvdoctor/core/sglang/_generated/server_flags.py
(the source may also be an unpacked wheel: pip download --no-deps sglang==X; the Python must import that SGLang).

SGLang (0.5.23) builds its server parser in two places, both read here with ``ast``:
- ``srt/arg_groups/fields/*.py``: one ``msgspec.Struct`` per namespace listed in ``_INPUT_NAMESPACES``
  (``srt/server_args.py``). ``arg_utils.add_cli_args_from_dataclass`` registers each field annotated
  ``A[T, "help"]`` or ``A[T, Arg(...)]`` as ``Arg.cli_name`` or ``--field-name``, plus ``Arg.aliases``,
  unless ``Arg(no_cli=True)``; a field whose metadata is neither a string nor an ``Arg`` is skipped.
- ``ServerArgs.add_cli_args`` in ``srt/server_args.py``: flags with dynamic choices, deprecated
  spellings and ``--config``, registered by hand with ``parser.add_argument``.
Flags that take no value (``store_true`` fields, ``action=`` flags without ``nargs``) are listed
again in ``SGLANG_SWITCHES``, flags that take a list (``nargs`` + or *) in ``SGLANG_MULTI_VALUE``, and
flags whose value may be left out (``nargs`` ?) in ``SGLANG_OPTIONAL_VALUE``, so kvdoctor can tell a
flag's values from a positional word that follows them.
The metadata is read as SGLang's ``_unwrap_annotated`` reads it: the first ``Arg`` or string wins.

Each option string's dest (``SGLANG_FLAG_DESTS``: the attribute its action stores into, so ``--model`` and
``--model-path`` are one flag) is read from the same parser.

Each flag's value grammar (``SGLANG_FLAG_VALUES``: the ``type`` its action converts with, its ``nargs`` and
``choices``) is read from SGLang's own parser (``ServerArgs.add_cli_args`` on an ``argparse`` parser), which
the script imports; the option strings that parser registers must be the ones read from the source, or the
script stops (the two readings describe one parser). A converter that is a function of SGLang's own, other
than the ones kvdoctor restates (``kvdoctor/core/flag_values.py``), is recorded as ``custom:<name>``.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

from table_literals import dests_lines, literal, scalar_defaults, values_lines  # scripts/table_literals.py, a sibling

VALUE_ACTIONS = frozenset({"store", "append", "extend"})


SWITCH, ONE, OPTIONAL, MANY = "switch", "one", "optional", "many"  # values: none, one, nargs ?, nargs + or *


@dataclass(frozen=True)
class Flag:
    names: tuple[str, ...]
    arity: str  # SWITCH, ONE, OPTIONAL or MANY


def _const_str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _is_help_text(node: ast.AST) -> bool:
    if isinstance(node, ast.JoinedStr) or _const_str(node) is not None:
        return True
    return isinstance(node, ast.BinOp) and _is_help_text(node.left) and _is_help_text(node.right)


def _keyword(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _names_boolean_optional(action: ast.AST) -> bool:
    name = action.attr if isinstance(action, ast.Attribute) else getattr(action, "id", "")
    return name == "BooleanOptionalAction"


def _nargs(call: ast.Call) -> ast.AST | None:
    """``nargs=`` of an ``Arg(...)`` / ``add_argument(...)``, directly or inside ``action_kwargs``."""
    nargs = _keyword(call, "nargs")
    extra = _keyword(call, "action_kwargs")
    if nargs is None and isinstance(extra, ast.Dict):
        nargs = next(
            (v for k, v in zip(extra.keys, extra.values, strict=True) if k is not None and _const_str(k) == "nargs"),
            None,
        )
    return None if isinstance(nargs, ast.Constant) and nargs.value is None else nargs


def _nargs_arity(nargs: ast.AST | None, default: str) -> str:
    if nargs is None:
        return default
    value = nargs.value if isinstance(nargs, ast.Constant) else None
    return MANY if value in ("+", "*") else OPTIONAL if value == "?" else ONE


def _action_arity(call: ast.Call) -> str:
    """argparse's built-in value actions take values; the custom actions SGLang registers without a
    ``nargs`` (store_true spellings, deprecated switches) take none."""
    action = _keyword(call, "action")
    if action is None or _const_str(action) in VALUE_ACTIONS:
        return _nargs_arity(_nargs(call), ONE)
    if _names_boolean_optional(action):
        return SWITCH
    if _keyword(call, "nargs") is not None:  # an explicit nargs=None asks for argparse's one value
        return _nargs_arity(_nargs(call), ONE)
    return _nargs_arity(_nargs(call), SWITCH)


def _is_annotated(node: ast.AST) -> bool:
    if not isinstance(node, ast.Subscript):
        return False
    base = node.value
    return (isinstance(base, ast.Name) and base.id in ("A", "Annotated")) or (
        isinstance(base, ast.Attribute) and base.attr == "Annotated"
    )


def _is_bool(node: ast.AST) -> bool:
    """``bool`` or ``Optional[bool]`` / ``bool | None``: SGLang registers these as store_true."""
    if isinstance(node, ast.Name):
        return node.id == "bool"
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Optional":
        return _is_bool(node.slice)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        sides = [node.left, node.right]
        return any(_is_bool(s) for s in sides) and all(
            _is_bool(s) or (isinstance(s, ast.Constant) and s.value is None) for s in sides
        )
    return False


def _unwrap_optional(node: ast.AST) -> ast.AST:
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Optional":
        return node.slice
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        sides = [x for x in (node.left, node.right) if not (isinstance(x, ast.Constant) and x.value is None)]
        if len(sides) == 1:
            return sides[0]
    return node


def _is_list(node: ast.AST) -> bool:
    """``List[X]`` / ``list[X]`` (after Optional): SGLang registers these with ``nargs="+"``."""
    node = _unwrap_optional(node)
    return isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in ("List", "list")


def _field_arity(inner: ast.AST, arg: ast.Call | None) -> str:
    """arg_utils.add_cli_args_from_dataclass: action, then Literal, then List, then bool, then scalar."""
    if arg is not None and _keyword(arg, "action") is not None:
        return _action_arity(arg)
    nargs = _nargs(arg) if arg is not None else None
    type_parser = _keyword(arg, "type_parser") if arg is not None else None
    if _is_list(inner) and type_parser is None and not _isliteral(inner):
        return _nargs_arity(nargs, MANY)
    if _is_bool(inner):
        return SWITCH
    return _nargs_arity(nargs, ONE)


def _isliteral(node: ast.AST) -> bool:
    node = _unwrap_optional(node)
    return isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Literal"


def _field_flag(field: ast.AnnAssign, where: str) -> Flag | None:
    if not isinstance(field.target, ast.Name) or not _is_annotated(field.annotation):
        return None
    parts = field.annotation.slice
    if not isinstance(parts, ast.Tuple) or len(parts.elts) < 2:
        return None
    inner, metadata = parts.elts[0], parts.elts[1:]
    for meta in metadata:
        if _is_help_text(meta):
            return Flag(("--" + field.target.id.replace("_", "-"),), _field_arity(inner, None))
        if isinstance(meta, ast.Call) and isinstance(meta.func, ast.Name) and meta.func.id == "Arg":
            no_cli = _keyword(meta, "no_cli")
            if isinstance(no_cli, ast.Constant) and no_cli.value is True:
                return None
            cli_name = _keyword(meta, "cli_name")
            name = _const_str(cli_name) if cli_name is not None else "--" + field.target.id.replace("_", "-")
            aliases = _keyword(meta, "aliases")
            alias_names = [_const_str(a) for a in aliases.elts] if isinstance(aliases, ast.List) else []
            if name is None or None in alias_names:
                raise SystemExit(f"{where}: {field.target.id}: a flag name that is not a string literal")
            names = [name, *[a for a in alias_names if a is not None]]
            action = _keyword(meta, "action")
            if action is not None and _names_boolean_optional(action):  # argparse adds --no-<name>
                names += ["--no-" + n[2:] for n in names if n.startswith("--")]
            return Flag(tuple(names), _field_arity(inner, meta))
        if isinstance(meta, (ast.Name, ast.Attribute, ast.Call)):
            raise SystemExit(f"{where}: {field.target.id}: metadata {ast.unparse(meta)} is not a literal")
    return None


def _assigns(node: ast.AST, name: str) -> bool:
    """``name = ...`` (or ``name = other = ...``) at module level."""
    return isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)


def _input_namespaces(server_args: Path) -> set[str]:
    tree = ast.parse(server_args.read_text(encoding="utf-8"))
    for node in tree.body:
        if _assigns(node, "_INPUT_NAMESPACES"):
            return {e.id for e in node.value.elts if isinstance(e, ast.Name)}  # type: ignore[attr-defined]
    raise SystemExit(f"{server_args}: no _INPUT_NAMESPACES list")


def field_flags(root: Path) -> list[Flag]:
    wanted = _input_namespaces(root / "srt" / "server_args.py")
    flags: list[Flag] = []
    found: set[str] = set()
    for module in sorted((root / "srt" / "arg_groups" / "fields").glob("*.py")):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        for cls in tree.body:
            if not isinstance(cls, ast.ClassDef) or cls.name not in wanted:
                continue
            found.add(cls.name)
            for stmt in cls.body:
                if isinstance(stmt, ast.AnnAssign):
                    flag = _field_flag(stmt, f"{module.name}:{stmt.lineno}")
                    if flag is not None:
                        flags.append(flag)
    if found != wanted:
        raise SystemExit(f"namespaces not found under arg_groups/fields: {sorted(wanted - found)}")
    return flags


def manual_flags(root: Path) -> list[Flag]:
    """``parser.add_argument("--x", ...)`` calls inside ``ServerArgs.add_cli_args``."""
    tree = ast.parse((root / "srt" / "server_args.py").read_text(encoding="utf-8"))
    server_args = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    add_cli = next(n for n in server_args.body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args")
    flags = []
    for call in ast.walk(add_cli):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument":
            names = tuple(s for s in (_const_str(a) for a in call.args) if s and s.startswith("-"))
            if names:
                flags.append(Flag(names, _action_arity(call)))
    return flags


def version(root: Path) -> str:
    text = (root / "_version.py").read_text(encoding="utf-8")  # written by the wheel build
    tree = ast.parse(text)
    for node in tree.body:
        if _assigns(node, "__version__"):
            return str(ast.literal_eval(node.value))  # type: ignore[attr-defined]
    raise SystemExit("no __version__ in _version.py")


def _frozenset(name: str, doc: str, values: set[str]) -> list[str]:
    lines = [f"# {doc}", f"{name}: frozenset[str] = frozenset(", "    {"]
    lines += [f'        "{v}",' for v in sorted(values)]
    return [*lines, "    }", ")"]


def _type_kind(action: object) -> str:
    """The kind of converter an argparse action applies (``kvdoctor/core/flag_values.py`` names them)."""
    import json

    converter = getattr(action, "type", None)
    if converter is None or converter is str:
        return "str"
    if converter in (int, float):
        return converter.__name__
    if converter is json.loads:
        return "json"
    module, name = getattr(converter, "__module__", ""), getattr(converter, "__qualname__", repr(converter))
    if (module, name) == ("sglang.srt.utils.common", "human_readable_int"):
        return "sglang_human_int"
    return f"custom:{name}"


def live_parser() -> argparse.ArgumentParser:
    """SGLang's own server parser (``ServerArgs.add_cli_args`` on argparse, as ``prepare_server_args`` builds it)."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(add_help=False)
    ServerArgs.add_cli_args(parser)
    return parser


def dest_table(parser: argparse.ArgumentParser) -> dict[str, str]:
    """option string -> the dest its action stores into: option strings with one dest are one flag to SGLang
    (``--model`` is ``--model-path``: arg_groups/fields/model.py ``aliases``; ``--monokernel-backend`` is a second
    action on ``--enable-amd-monokernel``'s dest)."""
    return {option: action.dest for option, action in parser._option_string_actions.items()}


def default_table(parser: argparse.ArgumentParser) -> dict[str, object]:
    """dest -> the default SGLang's parser gives it (None: the flag left out, SGLang decides at start-up)."""
    return scalar_defaults({a.dest: a.default for a in parser._actions if a.dest != "help"})


def value_table(parser: argparse.ArgumentParser) -> dict[str, tuple[str, object, object]]:
    """option string -> (type kind, nargs, choices), from SGLang's own parser."""
    table: dict[str, tuple[str, object, object]] = {}
    for option, action in parser._option_string_actions.items():
        nargs = action.nargs  # argparse's own store_const/store_true actions set 0 themselves
        choices = None if action.choices is None else tuple(literal(c) for c in action.choices)
        if choices is not None and not isinstance(action.choices, (list, tuple)):  # a set: no order to keep
            choices = tuple(sorted(choices, key=str))
        table[option] = (_type_kind(action) if nargs != 0 else "switch", nargs, choices)
    return table


def main(root_arg: str) -> None:
    root = Path(root_arg)
    flags = field_flags(root) + manual_flags(root)
    names = {n for f in flags for n in f.names}
    parser = live_parser()
    values = value_table(parser)
    dests = dest_table(parser)
    if set(values) != names:
        raise SystemExit(
            f"SGLang's parser and its source disagree: parser only {sorted(set(values) - names)}, "
            f"source only {sorted(names - set(values))}"
        )
    switches = {n for f in flags if f.arity == SWITCH for n in f.names}
    many = {n for f in flags if f.arity == MANY for n in f.names}
    optional = {n for f in flags if f.arity == OPTIONAL for n in f.names}
    ver = version(root)
    out = [
        f'"""Every option string SGLang {ver} accepts on its server command line (``sglang serve``,',
        "``python -m sglang.launch_server``).",
        "",
        "Data, not logic: generated by ``scripts/sglang-server-flags.py`` from SGLang's source",
        f"(sglang=={ver}), which reads ``srt/arg_groups/fields/*.py`` and ``ServerArgs.add_cli_args`` with",
        "``ast``, and from SGLang's own parser (the value grammar; run in .venv-sglang). kvdoctor refuses an",
        "option that is neither its own nor listed here and a value SGLang's parser refuses, and lists SGLang",
        "flags it does not model as not modelled. Regenerate when the modelled revision moves.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from kvdoctor.core.flag_values import ValueGrammar",
        "",
        f'SGLANG_VERSION = "{ver}"',
        "",
        *_frozenset("SGLANG_SERVER_FLAGS", "Every option string, aliases included.", names),
        "",
        *_frozenset("SGLANG_SWITCHES", "The options that take no value (store_true and friends).", switches),
        "",
        *_frozenset("SGLANG_MULTI_VALUE", "The options that take a list of values (nargs + or *).", many),
        "",
        *_frozenset("SGLANG_OPTIONAL_VALUE", "The options whose one value may be left out (nargs ?).", optional),
        "",
        *values_lines(
            "SGLANG_FLAG_VALUES",
            [
                "Each option string's value grammar, read from SGLang's own parser: (type kind, nargs, choices);",
                "kinds and their checks: kvdoctor/core/flag_values.py (custom:<name>: a converter not restated).",
            ],
            values,
        ),
        "",
        *dests_lines(
            "SGLANG_FLAG_DESTS",
            [
                "Each option string's dest (the attribute SGLang's parser stores it in), from SGLang's own parser:",
                "option strings with one dest are one flag (aliases; kvdoctor.core.owned_flags owns a flag by dest).",
            ],
            dests,
        ),
        "",
        *dests_lines(
            "SGLANG_DEST_DEFAULTS",
            [
                "Each dest's default in SGLang's own parser (scalars only; None: left out, SGLang decides at start-up,",
                "as for --chunked-prefill-size). kvdoctor sweep's space reads each flag's default here.",
            ],
            default_table(parser),
            "object",
        ),
    ]
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1])
