"""``@record``: ``@dataclass`` with the same behaviour, for a fraction of its cost to create.

``dataclasses.dataclass`` compiles every method it generates from source text with ``exec``: a frozen class
gets ``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__`` and ``__delattr__``, six compiles,
about 1.5 ms a class, and ``kvdoctor inspect`` makes some fifty at import (issue 17 holds its start-up to
1.5x the bare typer+rich floor: ``kvdoctor bench startup``). ``record`` lets ``dataclasses`` make the class
(fields, ``__init__``, ``__match_args__``, the docstring: one compile) and gives it the other methods as
closures over its field names, which cost no compile; each behaves as the method ``dataclasses`` would have
generated (Python 3.10-3.12):

- ``__repr__``: ``Name(a=1, b='x')`` over the ``repr=True`` fields, ``...`` for a recursive reference;
- ``__eq__``: the ``compare=True`` fields as one tuple against the other's, for an object of the very same
  class (else ``NotImplemented``); ``__hash__``: the hash of the hashed fields' tuple when frozen, ``None``
  (unhashable) when not, an explicit ``__hash__`` in the class body kept, as ``dataclasses`` decides;
- ``frozen=True``: assigning or deleting a field (or any attribute of the class itself, not of a subclass)
  raises ``dataclasses.FrozenInstanceError`` with ``dataclasses``' message. The generated ``__init__`` sets
  each field once, before it can be read; every later assignment is refused.

``dataclasses.fields``, ``asdict``, ``replace``, ``is_dataclass``, pickling and copying see a dataclass. Its
``__dataclass_params__`` reads ``repr``, ``eq`` and ``frozen`` False (``dataclasses`` did not generate them),
so a subclass of a record is itself a ``record`` with the same ``frozen``. Options ``record`` has no cheaper
form of (``order``, ``unsafe_hash``, ``slots``, ``weakref_slot``), or a base that is a plain dataclass, are
handed to ``dataclasses.dataclass`` unchanged. Type checkers read ``record`` as ``dataclasses.dataclass``.
"""

from __future__ import annotations

import dataclasses
from _thread import get_ident
from operator import attrgetter
from typing import TYPE_CHECKING, Any

__all__ = ["record"]

_FROZEN = "__kvdoctor_record_frozen__"  # set on each record class: its own frozen flag, for its subclasses
_PLAIN_ONLY = ("order", "unsafe_hash", "slots", "weakref_slot")  # options record passes to dataclasses whole


def _getter(names: tuple[str, ...]) -> Any:
    """OBJ -> the tuple of its NAMES attributes (one C call; ``attrgetter`` of one name returns no tuple)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


def _name(cls: type, method: Any) -> Any:
    method.__qualname__ = f"{cls.__qualname__}.{method.__name__}"
    return method


def _repr_method(cls: type, names: tuple[str, ...]) -> Any:
    running: set[tuple[int, int]] = set()

    def __repr__(self: Any) -> str:
        key = id(self), get_ident()
        if key in running:
            return "..."
        running.add(key)
        try:
            parts = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        finally:
            running.discard(key)
        return f"{self.__class__.__qualname__}({parts})"

    return _name(cls, __repr__)


def _eq_method(cls: type, names: tuple[str, ...]) -> Any:
    values = _getter(names)

    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    return _name(cls, __eq__)


def _hash_method(cls: type, names: tuple[str, ...]) -> Any:
    values = _getter(names)

    def __hash__(self: Any) -> int:
        return hash(values(self))

    return _name(cls, __hash__)


def _frozen_methods(cls: type, names: frozenset[str], set_by_init: frozenset[str]) -> tuple[Any, Any]:
    assign = object.__setattr__

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if name in set_by_init and name not in self.__dict__:  # the generated __init__, setting the field
            assign(self, name, value)
        elif type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        else:
            super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return _name(cls, __setattr__), _name(cls, __delattr__)


def _base_frozen(cls: type) -> list[bool | None]:
    """Each dataclass base's frozen flag, None for a base ``dataclasses`` made itself."""
    return [vars(b).get(_FROZEN) for b in cls.__mro__[1:] if "__dataclass_fields__" in vars(b)]


def _make(cls: type, *, repr: bool, eq: bool, frozen: bool, options: dict[str, Any]) -> type:
    bases = _base_frozen(cls)
    if None in bases or any(options.get(name) for name in _PLAIN_ONLY):
        return dataclasses.dataclass(cls, repr=repr, eq=eq, frozen=frozen, **options)
    if bases and frozen and not all(bases):
        raise TypeError("cannot inherit frozen dataclass from a non-frozen one")
    if bases and not frozen and any(bases):
        raise TypeError("cannot inherit non-frozen dataclass from a frozen one")
    own = dict(vars(cls))
    class_hash = own.get("__hash__", dataclasses.MISSING)
    explicit_hash = not (class_hash is dataclasses.MISSING or (class_hash is None and "__eq__" in own))
    if frozen:
        for method in ("__setattr__", "__delattr__"):
            if method in own:
                raise TypeError(f"Cannot overwrite attribute {method} in class {cls.__name__}")
    dataclasses.dataclass(cls, repr=False, eq=False, frozen=False, **options)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    setattr(cls, _FROZEN, frozen)
    if repr and "__repr__" not in own:
        cls.__repr__ = _repr_method(cls, tuple(f.name for f in fields if f.repr))  # type: ignore[method-assign]
    if eq and "__eq__" not in own:
        cls.__eq__ = _eq_method(cls, tuple(f.name for f in fields if f.compare))  # type: ignore[method-assign]
    if eq and not explicit_hash:
        hashed = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
        cls.__hash__ = _hash_method(cls, hashed) if frozen else None  # type: ignore[method-assign,assignment]
    if frozen:
        # What the generated __init__ assigns: its parameters and the init=False fields with a default factory
        # (an init=False field with a plain default is read from the class, never assigned).
        assigned = options.get("init", True)
        by_init = frozenset(
            f.name for f in fields if assigned and (f.init or f.default_factory is not dataclasses.MISSING)
        )
        methods = _frozen_methods(cls, frozenset(f.name for f in fields), by_init)
        cls.__setattr__, cls.__delattr__ = methods  # type: ignore[method-assign,assignment]
    return cls


if TYPE_CHECKING:
    from dataclasses import dataclass as record
else:

    def record(
        cls: type | None = None, /, *, repr: bool = True, eq: bool = True, frozen: bool = False, **options: Any
    ) -> Any:
        """``@record``, ``@record(frozen=True)``: as ``@dataclass`` with the same arguments (module docstring)."""

        def wrap(cls: type) -> type:
            return _make(cls, repr=repr, eq=eq, frozen=frozen, options=options)

        return wrap if cls is None else wrap(cls)
