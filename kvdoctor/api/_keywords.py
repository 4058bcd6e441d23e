"""A public function made from a command's options record (``kvdoctor.core.declared``): its keyword arguments are
the record's options, by the same names and defaults as the command's, checked against their annotations
(``kvdoctor.api._arguments``); its body receives the record.

``inspect.signature`` (and so ``help()``, docs/api.md and ``tests/api/test_signatures.py``) reads the made signature:
the record's argument positional, every option keyword-only, then ``server_args`` where the command takes the server's
flags (what follows MODEL or ``--`` on its command line: a list, or one string split as a shell splits it, into the
record's field FLAGS_INTO), then the API's own keywords (EXTRA).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from kvdoctor.api._arguments import checked
from kvdoctor.api._job import flags
from kvdoctor.core.declared import REQUIRED, build, declared

__all__ = ["SERVER_ARGS", "keyword_function", "own"]

SERVER_ARGS = "server_args"  # the keyword of the server's flags


def own(name: str, annotation: str, default: Any) -> inspect.Parameter:
    """One of the API's own keyword arguments (what follows ``--`` on a command line, a progress callback)."""
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def keyword_function(
    cls: type,
    body: Callable[..., Any],
    *,
    name: str,
    module: str,
    doc: str,
    flags_into: str | None = None,
    extra: Sequence[inspect.Parameter] = (),
) -> Callable[..., Any]:
    """``kvdoctor.api.NAME``: CLS's options as its arguments, then ``server_args`` (into the field FLAGS_INTO; None:
    the command takes no server flags), then EXTRA; it calls ``BODY(record, **extra)``."""
    params = []
    for d in declared(cls):
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD if d.is_argument else inspect.Parameter.KEYWORD_ONLY
        default = inspect.Parameter.empty if d.default is REQUIRED else d.default
        params.append(inspect.Parameter(d.keyword, kind, default=default, annotation=d.annotation))
    options = {p.name for p in params}
    if flags_into is not None:
        params.append(own(SERVER_ARGS, "str | Sequence[str]", ()))
    signature = inspect.Signature([*params, *extra], return_annotation="Report")

    def call(*args: Any, **kwargs: Any) -> Any:
        given = signature.bind(*args, **kwargs).arguments
        fields = {flags_into: flags(given.pop(SERVER_ARGS, ()))} if flags_into is not None else {}
        record = build(cls, {k: v for k, v in given.items() if k in options}, **fields)
        return body(record, **{k: v for k, v in given.items() if k not in options})

    call.__name__ = call.__qualname__ = name
    call.__module__ = module
    call.__doc__ = doc
    call.__signature__ = signature  # type: ignore[attr-defined]
    return checked(call)
