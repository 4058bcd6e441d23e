"""Each public function's arguments held to its annotations before the job sees them.

A Python caller's wrong type is a :class:`TypeError` naming the function, the keyword, what it takes and what it got
(``requests=float("inf")`` was an ``OverflowError`` deep in the job, ``requests="abc"`` a ``ValueError``,
``tokens="x"`` another); a path given as ``str`` (or any ``os.PathLike``) where the signature says ``Path`` is that
path (``fault_file="f.py"`` and ``bundle="dir"`` were ``AttributeError``\\ s), and a model given as a path is its
string. Values inside a keyword's type (a negative count, a choice that is not one) stay the job's to refuse, as
``InputError`` (exit 2), as the CLI refuses them.

The checks are read from the annotation strings (``from __future__ import annotations`` keeps them as text): ``int``
(never ``bool``), ``float`` (an int too), ``bool``, ``str``, ``Path``, ``None``, ``Sequence[str]``, a callable
(``Progress``), and the choice enums (``Server | str``: a member or its value, checked by the job).
"""

from __future__ import annotations

import enum
import functools
import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_PLAIN = {"int", "float", "bool", "str", "Path", "None", "Sequence[str]", "Progress"}


def checked(function: F) -> F:
    """FUNCTION with its arguments held to its annotations (see the module's docstring)."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)  # an unknown or missing keyword: Python's own TypeError
        for name, value in list(bound.arguments.items()):
            annotation = signature.parameters[name].annotation
            bound.arguments[name] = _held(function.__name__, name, str(annotation), value)
        return function(*bound.args, **bound.kwargs)

    return call  # type: ignore[return-value]


def _held(function: str, name: str, annotation: str, value: Any) -> Any:
    kinds = [k.strip() for k in annotation.split("|")]
    for kind in kinds:
        ok, held = _as(kind, value)
        if ok:
            return held
    wanted = " or ".join(_words(k) for k in kinds)
    raise TypeError(f"kvdoctor.api.{function}(): {name} must be {wanted}, got {type(value).__name__} {value!r:.80}")


def _as(kind: str, value: Any) -> tuple[bool, Any]:
    """(VALUE fits KIND, VALUE as the job takes it)."""
    if kind == "None":
        return value is None, value
    if kind == "bool":
        return isinstance(value, bool), value
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool), value
    if kind == "float":
        return isinstance(value, int | float) and not isinstance(value, bool), value
    if kind == "str":
        if isinstance(value, os.PathLike):  # a model directory given as a path
            return True, os.fspath(value)
        return isinstance(value, str), value
    if kind == "Path":
        if isinstance(value, str | os.PathLike):
            return True, Path(os.fspath(value))
        return False, value
    if kind == "Sequence[str]":
        items = isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
        return items, value
    if kind == "Progress":
        return callable(value), value
    return isinstance(value, enum.Enum), value  # a choice enum by member (its value is a str: checked above)


def _words(kind: str) -> str:
    return {"Sequence[str]": "a list of str", "Progress": "a callable (phase, message)", "None": "None"}.get(
        kind, kind if kind in _PLAIN else f"a {kind}"
    )
