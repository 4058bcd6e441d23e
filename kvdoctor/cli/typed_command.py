"""A Typer command made from a command's options record (``kvdoctor.core.declared``): the record's fields are the
options, spelled, helped, defaulted and typed as the record declares them; the command adds only what shows the
result (``--json``, ``--dry-run``), and its body receives the record.

Typer reads a command's parameters from its signature (``inspect.signature``, which honours ``__signature__``) and
their types from its annotations, so the made function carries both; it is called with every parameter by keyword,
as Typer calls any command.
"""

from __future__ import annotations

import enum
import inspect
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import typer

from kvdoctor.core.declared import REQUIRED, Declared, build, declared

__all__ = ["KEYWORD", "command", "parameter", "shown_option"]

KEYWORD = inspect.Parameter.POSITIONAL_OR_KEYWORD  # how Typer's parameters are made (it passes each by keyword)

Body = Callable[..., None]  # (ctx, options, **shown): the command's work, given the record


def parsed(annotation: Any) -> Any:
    """The type the command line parses for a field of type ANNOTATION: a choice enum where the API takes the enum
    or its value (``Engine | str``: Typer lists the choices in --help and refuses a typo); a repeatable option where
    the API takes one name or several (``str | Sequence[str] | None``)."""
    members = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else ()
    optional = type(None) in members
    if annotation == tuple[str, ...] or Sequence[str] in members or tuple[str, ...] in members:
        return list[str] | None if optional else list[str]
    choices = [m for m in members if isinstance(m, type) and issubclass(m, enum.Enum)]
    if len(choices) == 1 and str in members:
        return choices[0] | None if optional else choices[0]
    return annotation


def _is_tuple(annotation: Any) -> bool:
    members = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    return tuple[str, ...] in members


def parameter(d: Declared, cli_type: Any = None) -> inspect.Parameter:
    """The Typer parameter of one declared option (parsed as CLI_TYPE; None: as its field's type says)."""
    extra = dict(d.opt.extra)
    if d.is_argument:
        default = typer.Argument(... if d.default is REQUIRED else d.default, help=d.opt.help, **extra)
    else:
        default = typer.Option(d.default, *d.opt.flags, help=d.opt.help, **extra)
    return inspect.Parameter(d.keyword, KEYWORD, default=default, annotation=cli_type or parsed(d.type))


def shown_option(name: str, flag: str, *, help: str, default: Any = False, annotation: Any = bool) -> inspect.Parameter:
    """An option of the command's own that chooses how the result is shown (``--json``): not the run's."""
    return inspect.Parameter(name, KEYWORD, default=typer.Option(default, flag, help=help), annotation=annotation)


def command(
    cls: type,
    body: Body,
    *,
    name: str,
    doc: str,
    only: Sequence[str] | None = None,
    shown: Sequence[inspect.Parameter] = (),
    before: str | Mapping[str, str] | None = None,
    parse_as: Mapping[str, Any] | None = None,
) -> Callable[..., None]:
    """The Typer command NAME (help DOC) taking CLS's options (ONLY those keywords, in CLS's order, when given; the
    others keep their defaults) and SHOWN, the options that choose how the result is shown, each placed before the
    option BEFORE names (one keyword for all, or one per shown option by its name; None: last); PARSE_AS, the command
    line's own type for a keyword (a choice enum the record takes as text). Typer calls it with them; it calls
    ``BODY(ctx, record, **shown)``."""
    options = [d for d in declared(cls) if only is None or d.keyword in only]
    missing = sorted(set(only or ()) - {d.keyword for d in options})
    if missing:
        raise TypeError(f"{name}: {cls.__name__} declares no {', '.join(missing)}")
    params = [parameter(d, (parse_as or {}).get(d.keyword)) for d in options]
    for p in shown:
        target = before.get(p.name) if isinstance(before, Mapping) else before
        params.insert(next((i for i, q in enumerate(params) if q.name == target), len(params)), p)
    ctx = inspect.Parameter("ctx", KEYWORD, annotation=typer.Context)
    names = {p.name for p in shown}
    tuples = {d.keyword for d in options if _is_tuple(d.type)}  # parsed as a list, kept as the record's tuple

    def run(ctx: typer.Context, **given: Any) -> None:
        values = {k: tuple(v) if k in tuples and isinstance(v, list) else v for k, v in given.items()}
        record = build(cls, {k: v for k, v in values.items() if k not in names})
        body(ctx, record, **{k: v for k, v in given.items() if k in names})

    run.__name__ = run.__qualname__ = name
    run.__doc__ = doc
    run.__signature__ = inspect.Signature([ctx, *params], return_annotation=None)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in (ctx, *params)} | {"return": None}
    return run
