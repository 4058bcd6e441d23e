"""Options declared once: a command's frozen options record is the only place an option is written down.

pytest's rule ("declare once, where it is read": ``parser.addoption`` once, ``config.getoption`` where needed), in a
record: each field a command takes carries its command-line face in its metadata (:func:`option`, :func:`argument`),
and a field holding a smaller record of options (:func:`group`, e.g. the workload) lends that record's options as
its own. From the record alone:

- ``kvdoctor.cli.typed_command`` builds the Typer command (each option's spelling, help, default and type);
- ``kvdoctor.api._keywords`` builds the keyword API (the same names and defaults, checked against the annotations);
- :func:`build` makes the record from the values either of them was given, by keyword; nothing else reads an
  option by a string key.

A keyword may differ from its field's name where the public name is older than the record (``--timeout`` and the
API's ``timeout`` fill ``timeout_s``). Pure: no Typer here (the core floor), so a record in any floor can declare its
options; the CLI reads the metadata.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, TypeVar

from kvdoctor.core.record import record

__all__ = ["Declared", "Opt", "argument", "build", "declared", "group", "option"]

T = TypeVar("T")

OPT = "kvdoctor.option"  # a field's metadata key: its Opt
GROUP = "kvdoctor.option-group"  # a field's metadata key: the record class whose options it lends
DEFAULTS = "kvdoctor.option-group-defaults"  # ... and the group's default record (None: the class's defaults)
REQUIRED = dataclasses.MISSING  # the default of an option that has none (an argument the caller must give)


@record(frozen=True)
class Opt:
    """One option's command-line face: its spellings (none: a positional argument), help, the keyword it goes by
    (None: the field's name) and what else its parser is told (``min``, ``metavar``...)."""

    flags: tuple[str, ...]
    help: str
    keyword: str | None = None
    extra: tuple[tuple[str, Any], ...] = ()


def option(default: Any, *flags: str, help: str, keyword: str | None = None, **extra: Any) -> Any:
    """A field that is a command's option: ``timeout_s: float = option(1800.0, "--timeout", help=..., keyword=...)``."""
    opt = Opt(tuple(flags), help, keyword, tuple(sorted(extra.items())))
    return dataclasses.field(default=default, metadata={OPT: opt})


def argument(*, help: str, default: Any = REQUIRED) -> Any:
    """A field that is a command's positional argument (no DEFAULT: the caller must give it)."""
    return dataclasses.field(default=default, metadata={OPT: Opt((), help)})


def group(cls: Callable[[], Any], default: Any = None) -> Any:
    """A field holding a record of options, whose options the command takes as its own, by their keywords; its
    default DEFAULT (None: the record's own defaults) is where each of them defaults."""
    made = cls if default is None else (lambda: default)
    return dataclasses.field(default_factory=made, metadata={GROUP: cls, DEFAULTS: default})


@record(frozen=True)
class Declared:
    """One declared option as the commands and the API see it: its keyword, where it sits in the record (field
    names, outermost first), its annotation as written, its type, its default (:data:`REQUIRED`: none) and face."""

    keyword: str
    path: tuple[str, ...]
    annotation: str
    type: Any
    default: Any
    opt: Opt

    @property
    def is_argument(self) -> bool:
        return not self.opt.flags


@cache
def declared(cls: type) -> tuple[Declared, ...]:
    """CLS's options, its groups' spliced in where the group's field sits, in declaration order."""
    hints = typing.get_type_hints(cls)
    found: list[Declared] = []
    for f in dataclasses.fields(cls):
        if GROUP in f.metadata:
            inner, defaults = f.metadata[GROUP], f.metadata[DEFAULTS]
            for d in declared(inner):
                default = d.default if defaults is None else getattr(defaults, d.path[0])
                found.append(dataclasses.replace(d, path=(f.name, *d.path), default=default))
        elif OPT in f.metadata:
            opt: Opt = f.metadata[OPT]
            default = f.default if f.default is not dataclasses.MISSING else REQUIRED
            annotation = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
            found.append(Declared(opt.keyword or f.name, (f.name,), annotation, hints[f.name], default, opt))
    keywords = [d.keyword for d in found]
    if len(set(keywords)) != len(keywords):
        raise TypeError(f"{cls.__name__} declares a keyword twice: {keywords}")
    return tuple(found)


def build(cls: type[T], values: Mapping[str, Any], **fields: Any) -> T:
    """A CLS from VALUES (by keyword, as :func:`declared` names them; an option left out keeps its default) and
    FIELDS (undeclared fields by their names). An unknown keyword is a ``TypeError``, as a function's would be."""
    known = {d.keyword: d for d in declared(cls)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise TypeError(f"{cls.__name__}: unknown option(s) {', '.join(unknown)}")
    return _assemble(cls, {known[k].path: v for k, v in values.items()}, fields)  # type: ignore[no-any-return]


def _assemble(cls: type, given: Mapping[tuple[str, ...], Any], fields: Mapping[str, Any]) -> Any:
    kwargs = dict(fields)
    for f in dataclasses.fields(cls):
        if GROUP in f.metadata:
            inner = {path[1:]: v for path, v in given.items() if path[0] == f.name}
            if inner and f.metadata[DEFAULTS] is not None:
                kwargs[f.name] = dataclasses.replace(f.metadata[DEFAULTS], **{p[0]: v for p, v in inner.items()})
            elif inner:
                kwargs[f.name] = _assemble(f.metadata[GROUP], inner, {})
        elif (f.name,) in given:
            kwargs[f.name] = given[(f.name,)]
    return cls(**kwargs)
