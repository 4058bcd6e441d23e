"""Regenerate kvdoctor's vLLM data modules from an unpacked vLLM wheel (and, for the flags, vLLM's own parser).

Usage: pip download --no-deps vllm==X -d /tmp/w && unzip -q /tmp/w/*.whl 'vllm/*.py' -d /tmp/w/src
       .venv-vllm/bin/python scripts/vllm-tables.py flags /tmp/w/src/vllm \
           > kvdoctor/core/vllm/_generated/server_flags.py
       python scripts/vllm-tables.py architectures /tmp/w/src/vllm > kvdoctor/core/vllm/_generated/architectures.py
       PY_WITH_TRANSFORMERS scripts/vllm-tables.py model-types /tmp/w/src/vllm \
           > kvdoctor/core/vllm/_generated/model_types.py

``flags``: every option string ``vllm serve``'s own parser accepts (``entrypoints/common/cli_args.py:
make_arg_parser`` on ``FlexibleArgumentParser``, imported: run it in .venv-vllm), with its arity and value
grammar (the ``type`` its action converts with, ``nargs``, ``choices``) and dest (``VLLM_FLAG_DESTS``): the
keys of the parser's ``_option_string_actions``, so ``EnableDisableAction``'s ``--disable-x`` inverses and the
hidden ``--no-`` spellings it still accepts are all listed. A converter that is a vLLM function kvdoctor does not
restate (``kvdoctor/core/flag_values.py``) is recorded as ``custom:<name>``.

``architectures``: the keys of ``model_executor/models/registry.py:_VLLM_MODELS`` (the dicts it merges),
the architecture names vLLM serves.

``model-types``: the ``model_type`` values vLLM's config loader accepts (``transformers_utils/config.py``):
the keys of its own ``_CONFIG_REGISTRY = LazyConfigDict(...)`` (read with ``ast``) and those of transformers'
``CONFIG_MAPPING_NAMES``, which ``AutoConfig.from_pretrained`` builds; run it with a Python whose
transformers is the version constraints/vllm.txt pins (the script checks it).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from table_literals import dests_lines, literal, scalar_defaults, values_lines  # scripts/table_literals.py, a sibling

HELP = frozenset({"-h", "--help"})


def _const_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def live_parser() -> object:
    """``vllm serve``'s own parser: ``make_arg_parser`` on vLLM's ``FlexibleArgumentParser`` (imports vLLM)."""
    import os

    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return make_arg_parser(FlexibleArgumentParser())


def _kind(converter: object) -> str:
    """The kind of converter an argparse ``type`` is (``kvdoctor/core/flag_values.py`` names them)."""
    import json

    if converter is None or converter is str:
        return "str"
    if converter in (int, float):
        return converter.__name__  # type: ignore[attr-defined]
    if converter is json.loads:
        return "json"
    name = getattr(converter, "__qualname__", repr(converter))
    cells = [c.cell_contents for c in (getattr(converter, "__closure__", None) or ())]
    if name == "optional_type.<locals>._optional_type" and len(cells) == 1:  # engine/arg_utils.py: optional_type
        return f"optional:{_kind(cells[0])}"
    if name == "parse_type.<locals>._parse_type" and len(cells) == 1:  # engine/arg_utils.py: parse_type
        return _kind(cells[0])
    module = getattr(converter, "__module__", "")
    if module == "vllm.utils.argparse_utils" and name in ("human_readable_int", "human_readable_int_or_auto"):
        return f"vllm_human_{name.removeprefix('human_readable_')}"  # vllm_human_int, vllm_human_int_or_auto
    return f"custom:{name}"


def value_table(parser: object) -> dict[str, tuple[str, object, object]]:
    """option string -> (type kind, nargs, choices) for every option string the parser accepts."""
    table: dict[str, tuple[str, object, object]] = {}
    for option, action in parser._option_string_actions.items():  # type: ignore[attr-defined]
        if option in HELP:
            continue
        nargs = action.nargs
        if nargs not in (None, 0, "?", "+", "*"):
            raise SystemExit(f"{option}: nargs={nargs!r}, which kvdoctor's scanner does not read")
        choices = None if action.choices is None else tuple(literal(c) for c in action.choices)
        if choices is not None and not isinstance(action.choices, (list, tuple)):  # a set: no order to keep
            choices = tuple(sorted(choices, key=str))
        table[option] = ("switch" if nargs == 0 else _kind(action.type), nargs, choices)
    return table


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


def dest_table(parser: object) -> dict[str, str]:
    """option string -> the dest its action stores into (``--enable-x``, ``--disable-x`` and ``--no-enable-x`` share
    one): option strings with one dest are one flag to vLLM."""
    actions = parser._option_string_actions.items()  # type: ignore[attr-defined]
    return {option: action.dest for option, action in actions if option not in HELP}


def default_table(parser: object) -> dict[str, object]:
    """dest -> the default vLLM's parser gives it (None: the flag left out, vLLM decides at start-up)."""
    actions = parser._actions  # type: ignore[attr-defined]
    return scalar_defaults({a.dest: a.default for a in actions if a.dest != "help"})


def flags_module(root: Path) -> list[str]:
    parser = live_parser()
    table = value_table(parser)
    names = set(table)
    by = {
        "switch": {n for n, (_, nargs, _c) in table.items() if nargs == 0},
        "many": {n for n, (_, nargs, _c) in table.items() if nargs in ("+", "*")},
        "optional": {n for n, (_, nargs, _c) in table.items() if nargs == "?"},
    }
    ver = version(root)
    return [
        f'"""Every option string vLLM {ver} accepts on its server command line (``vllm serve``).',
        "",
        "Data, not logic: generated by ``scripts/vllm-tables.py flags`` from vLLM's own parser",
        f"(``entrypoints/common/cli_args.py:make_arg_parser`` of vllm=={ver}, in .venv-vllm), every string its",
        "``_option_string_actions`` registers (``--enable-x``'s ``--disable-x`` and hidden ``--no-`` spellings",
        "included), with each one's value grammar. kvdoctor refuses an option that is neither its own nor listed",
        "here, and a value vLLM's parser refuses. Regenerate when the modelled revision moves.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from kvdoctor.core.flag_values import ValueGrammar",
        "",
        f'VLLM_VERSION = "{ver}"',
        "",
        *_frozenset("VLLM_SERVER_FLAGS", "Every option string, aliases and --no- spellings included.", names),
        "",
        *_frozenset("VLLM_SWITCHES", "The options that take no value.", by["switch"]),
        "",
        *_frozenset("VLLM_MULTI_VALUE", "The options that take a list of values (nargs + or *).", by["many"]),
        "",
        *_frozenset("VLLM_OPTIONAL_VALUE", "The options whose one value may be left out (nargs ?).", by["optional"]),
        "",
        *values_lines(
            "VLLM_FLAG_VALUES",
            [
                "Each option string's value grammar, read from vLLM's own parser: (type kind, nargs, choices);",
                "kinds and their checks: kvdoctor/core/flag_values.py (custom:<name>: a converter not restated).",
            ],
            table,
        ),
        "",
        *dests_lines(
            "VLLM_FLAG_DESTS",
            [
                "Each option string's dest (the attribute vLLM's parser stores it in), from vLLM's own parser:",
                "option strings with one dest are one flag (aliases; kvdoctor.core.owned_flags owns a flag by dest).",
            ],
            dest_table(parser),
        ),
        "",
        *dests_lines(
            "VLLM_DEST_DEFAULTS",
            [
                "Each dest's default in vLLM's own parser (scalars only; None: left out, vLLM decides at start-up,",
                "as for --max-num-batched-tokens). kvdoctor sweep's space reads each flag's default here.",
            ],
            default_table(parser),
            "object",
        ),
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


def _config_registry(root: Path) -> set[str]:
    """The keyword names of ``_CONFIG_REGISTRY = LazyConfigDict(name="Class", ...)``."""
    tree = ast.parse((root / "transformers_utils" / "config.py").read_text(encoding="utf-8"))
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [None])[0]
        if isinstance(target, ast.Name) and target.id == "_CONFIG_REGISTRY" and isinstance(node.value, ast.Call):
            return {k.arg for k in node.value.keywords if k.arg is not None}
    raise SystemExit("transformers_utils/config.py: no _CONFIG_REGISTRY = LazyConfigDict(...)")


def _pinned_transformers() -> str:
    pins = Path(__file__).resolve().parents[1] / "constraints" / "vllm.txt"
    for line in pins.read_text(encoding="utf-8").splitlines():
        if line.startswith("transformers=="):
            return line.split("==", 1)[1].strip()
    raise SystemExit(f"{pins}: no transformers pin")


def model_types_module(root: Path) -> list[str]:
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    pinned = _pinned_transformers()
    if transformers.__version__ != pinned:
        raise SystemExit(f"transformers {transformers.__version__} is installed; vLLM's pin is {pinned}")
    names = set(CONFIG_MAPPING_NAMES) | _config_registry(root)
    ver = version(root)
    return [
        f'"""Every ``model_type`` vLLM {ver}\'s config loader accepts (``transformers_utils/config.py``).',
        "",
        "Data, not logic: generated by ``scripts/vllm-tables.py model-types`` from the unpacked wheel's",
        f"``_CONFIG_REGISTRY`` and transformers {pinned}'s ``CONFIG_MAPPING_NAMES`` (what ``AutoConfig`` builds);",
        "vLLM raises on any other model type.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        f'VLLM_TRANSFORMERS_VERSION = "{pinned}"',
        "",
        *_frozenset("VLLM_MODEL_TYPES", "Every model_type vLLM's get_config can build.", names),
    ]


def main(what: str, root_arg: str) -> None:
    root = Path(root_arg)
    modules = {"flags": flags_module, "architectures": architectures_module, "model-types": model_types_module}
    out = modules[what](root)
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
