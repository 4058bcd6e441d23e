"""Regenerate kvdoctor's vLLM data modules from an unpacked vLLM wheel, without importing vLLM.

Usage: pip download --no-deps vllm==X -d /tmp/w && unzip -q /tmp/w/*.whl 'vllm/*.py' -d /tmp/w/src
       python scripts/vllm-tables.py flags /tmp/w/src/vllm > kvdoctor/core/vllm/server_flags.py
       python scripts/vllm-tables.py architectures /tmp/w/src/vllm > kvdoctor/core/vllm/architectures.py

``flags``: vLLM (0.33) builds ``vllm serve``'s parser in ``entrypoints/common/cli_args.py:make_arg_parser``:
a few hand-written ``parser.add_argument`` calls, ``FrontendArgs.add_cli_args`` (one ``--field-name`` per
field of ``FrontendArgs`` and its base, plus the ``"flags"`` its ``_customize_cli_kwargs`` adds) and
``EngineArgs``/``AsyncEngineArgs.add_cli_args`` in ``engine/arg_utils.py`` (``add_argument("--x",
**cache_kwargs["field"])``, where ``cache_kwargs = get_kwargs(CacheConfig)``). Each flag's arity is read
as ``engine/arg_utils.py:_compute_kwargs`` derives it from the config field's annotation: ``bool | str``
takes an optional value (nargs ?), any other ``bool`` is a ``BooleanOptionalAction`` (a switch, plus its
``--no-`` spelling), a ``list`` takes several values, anything else one; explicit ``action=``/``nargs=``
keywords win.

``architectures``: the keys of ``model_executor/models/registry.py:_VLLM_MODELS`` (the dicts it merges),
the architecture names vLLM serves.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

SWITCH, ONE, OPTIONAL, MANY = "switch", "one", "optional", "many"


@dataclass(frozen=True)
class Flag:
    names: tuple[str, ...]
    arity: str


def _const_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _keyword(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _class_fields(root: Path) -> dict[str, dict[str, str]]:
    """Every class under config/ and the frontend args: its annotated fields (bases folded in)."""
    files = [*sorted((root / "config").glob("*.py")), root / "entrypoints" / "common" / "cli_args.py"]
    own: dict[str, dict[str, str]] = {}
    bases: dict[str, list[str]] = {}
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for cls in ast.walk(tree):
            if not isinstance(cls, ast.ClassDef):
                continue
            own[cls.name] = {
                stmt.target.id: ast.unparse(stmt.annotation)
                for stmt in cls.body
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
            }
            bases[cls.name] = [b.id for b in cls.bases if isinstance(b, ast.Name)]

    def folded(name: str) -> dict[str, str]:
        result: dict[str, str] = {}
        for base in bases.get(name, []):
            if base in own:
                result.update(folded(base))
        result.update(own.get(name, {}))
        return result

    return {name: folded(name) for name in own}


def _annotation_arity(annotation: str) -> str:
    words = set(annotation.replace("|", " ").replace("[", " ").replace("]", " ").replace(",", " ").split())
    if "bool" in words and "str" in words:
        return OPTIONAL
    if "bool" in words:
        return SWITCH
    if "list" in words or "List" in words:
        return MANY
    return ONE


def _explicit_arity(call: ast.Call, default: str) -> str:
    action = _keyword(call, "action")
    nargs = _keyword(call, "nargs")
    if nargs is not None and isinstance(nargs, ast.Constant):
        return MANY if nargs.value in ("+", "*") else OPTIONAL if nargs.value == "?" else ONE
    if action is not None:
        name = _const_str(action) or (action.attr if isinstance(action, ast.Attribute) else getattr(action, "id", ""))
        if name in ("store", "append", "extend"):
            return ONE
        return SWITCH
    return default


def _kwargs_sources(tree: ast.AST) -> dict[str, str]:
    """``cache_kwargs = get_kwargs(CacheConfig)`` → {"cache_kwargs": "CacheConfig"}."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and getattr(node.value.func, "id", None) == "get_kwargs"
            and node.value.args
            and isinstance(node.value.args[0], ast.Name)
        ):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.args[0].id
    return found


def _field_of(call: ast.Call, sources: dict[str, str]) -> tuple[str, str] | None:
    """(config class, field) of ``**cache_kwargs["field"]`` in an add_argument call."""
    for kw in call.keywords:
        if kw.arg is not None:
            continue
        # **cache_kwargs["field"], or **{**cache_kwargs["field"], "default": None}
        values = (
            [kw.value]
            if not isinstance(kw.value, ast.Dict)
            else [v for k, v in zip(kw.value.keys, kw.value.values, strict=True) if k is None]
        )
        for value in values:
            if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name):
                field = _const_str(value.slice)
                if value.value.id in sources and field:
                    return sources[value.value.id], field
    return None


def engine_flags(root: Path, fields: dict[str, dict[str, str]]) -> list[Flag]:
    flags: list[Flag] = []
    for path in (root / "engine" / "arg_utils.py", root / "entrypoints" / "common" / "cli_args.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        sources = _kwargs_sources(tree)
        for call in ast.walk(tree):
            if not (
                isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"
            ):
                continue
            names = tuple(s for s in (_const_str(a) for a in call.args) if s and s.startswith("-"))
            if not names:
                continue
            where = _field_of(call, sources)
            default = ONE
            if where is not None:
                annotation = fields.get(where[0], {}).get(where[1])
                if annotation is None:
                    raise SystemExit(f"{path}: {names[0]}: no field {where[1]} on {where[0]}")
                default = _annotation_arity(annotation)
            arity = _explicit_arity(call, default)
            if arity == SWITCH and where is not None and _keyword(call, "action") is None:
                names = (*names, *("--no-" + n[2:] for n in names if n.startswith("--")))  # BooleanOptionalAction
            flags.append(Flag(names, arity))
    return flags


def frontend_flags(root: Path, fields: dict[str, dict[str, str]]) -> list[Flag]:
    """``FrontendArgs.add_cli_args``: ``--field-name`` per field, bools as BooleanOptionalAction."""
    flags: list[Flag] = []
    tree = ast.parse((root / "entrypoints" / "common" / "cli_args.py").read_text(encoding="utf-8"))
    extra: dict[str, list[str]] = {}
    for node in ast.walk(tree):  # kwargs["field"]["flags"] = ["-x"] in _customize_cli_kwargs
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
            target = node.targets[0]
            if _const_str(target.slice) == "flags" and isinstance(target.value, ast.Subscript):
                field = _const_str(target.value.slice)
                if field and isinstance(node.value, ast.List):
                    extra[field] = [s for s in (_const_str(e) for e in node.value.elts) if s]
    for field, annotation in fields["FrontendArgs"].items():
        arity = _annotation_arity(annotation)
        name = "--" + field.replace("_", "-")
        names = [*extra.get(field, []), name]
        if arity == SWITCH:
            names.append("--no-" + name[2:])
        flags.append(Flag(tuple(names), arity))
    return flags


def version(root: Path) -> str:
    tree = ast.parse((root / "_version.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in node.targets):
            return str(ast.literal_eval(node.value))
    raise SystemExit("no __version__ in _version.py")


def _frozenset(name: str, doc: str, values: set[str]) -> list[str]:
    lines = [f"# {doc}", f"{name}: frozenset[str] = frozenset(", "    {"]
    lines += [f'        "{v}",' for v in sorted(values)]
    return [*lines, "    }", ")"]


def flags_module(root: Path) -> list[str]:
    fields = _class_fields(root)
    flags = engine_flags(root, fields) + frontend_flags(root, fields)
    names = {n for f in flags for n in f.names}
    by = {a: {n for f in flags if f.arity == a for n in f.names} for a in (SWITCH, MANY, OPTIONAL)}
    ver = version(root)
    return [
        f'"""Every option string vLLM {ver} accepts on its server command line (``vllm serve``).',
        "",
        "Data, not logic: generated by ``scripts/vllm-tables.py flags`` from the unpacked wheel",
        f"(``pip download --no-deps vllm=={ver}``), reading ``engine/arg_utils.py`` and",
        "``entrypoints/common/cli_args.py`` with ``ast`` (vLLM need not be importable). kvdoctor refuses an",
        "option that is neither its own nor listed here. Regenerate when the modelled revision moves.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        f'VLLM_VERSION = "{ver}"',
        "",
        *_frozenset("VLLM_SERVER_FLAGS", "Every option string, aliases and --no- spellings included.", names),
        "",
        *_frozenset("VLLM_SWITCHES", "The options that take no value.", by[SWITCH]),
        "",
        *_frozenset("VLLM_MULTI_VALUE", "The options that take a list of values (nargs + or *).", by[MANY]),
        "",
        *_frozenset("VLLM_OPTIONAL_VALUE", "The options whose one value may be left out (nargs ?).", by[OPTIONAL]),
    ]


def architectures_module(root: Path) -> list[str]:
    tree = ast.parse((root / "model_executor" / "models" / "registry.py").read_text(encoding="utf-8"))
    dicts: dict[str, ast.Dict] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and isinstance(node.value, ast.Dict):  # type: ignore[union-attr]
            dicts[target.id] = node.value  # type: ignore[union-attr]

    def keys(name: str) -> set[str]:
        found: set[str] = set()
        for key, value in zip(dicts[name].keys, dicts[name].values, strict=True):
            if key is None and isinstance(value, ast.Name):  # **_OTHER_MODELS
                found |= keys(value.id)
            elif (text := _const_str(key)) is not None:
                found.add(text)
        return found

    ver = version(root)
    return [
        f'"""The model architectures vLLM {ver} serves (``model_executor/models/registry.py:_VLLM_MODELS``).',
        "",
        "Data, not logic: generated by ``scripts/vllm-tables.py architectures`` from the unpacked wheel.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        *_frozenset("VLLM_ARCHITECTURES", "Every registered architecture name.", keys("_VLLM_MODELS")),
    ]


def main(what: str, root_arg: str) -> None:
    root = Path(root_arg)
    out = {"flags": flags_module, "architectures": architectures_module}[what](root)
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
