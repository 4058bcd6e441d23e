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

- ``__init__``: the one method ``dataclasses`` still compiles, and only when it is needed: a class with a
  docstring gets a stand-in (:class:`_DeferredInit`) that binds the arguments itself while they bind cleanly
  (the positional ones, then keywords, then the defaults and default factories, in field order, then
  ``__post_init__``), and hands every other call (a missing, unexpected or repeated argument: the
  ``TypeError`` to raise) to the generated ``__init__``, built then by ``dataclasses`` from the class's own
  fields. Reading ``__init__`` from the class (``Cls.__init__``, ``inspect.signature(Cls)``) builds it too
  and puts it in the class, so introspection sees exactly what ``@dataclass`` would have made. A class
  without a docstring (its docstring is the generated signature), with ``InitVar`` fields or with an
  invalid field order gets the generated ``__init__`` at once, as ``@dataclass`` does (and raises as it does).

- the fields themselves: on CPython 3.11, a class of ordinary fields (no dataclass base, no option but
  ``repr``, ``eq`` and ``frozen``, a docstring, every annotation naming a class or nothing the module
  defines, no ``ClassVar``, ``InitVar`` or ``KW_ONLY``, no unhashable default) gets the ``Field`` objects,
  ``__dataclass_fields__``, ``__dataclass_params__`` and ``__match_args__`` ``dataclasses`` would give it
  (:func:`_ordinary_fields`), without its per-annotation checks; any other class, or another Python, is
  handed to ``dataclasses`` for them.

``dataclasses.fields``, ``asdict``, ``replace``, ``is_dataclass``, pickling and copying see a dataclass. Its
``__dataclass_params__`` reads ``repr``, ``eq`` and ``frozen`` False (``dataclasses`` did not generate them),
so a subclass of a record is itself a ``record`` with the same ``frozen``. Options ``record`` has no cheaper
form of (``order``, ``unsafe_hash``, ``slots``, ``weakref_slot``), or a base that is a plain dataclass, are
handed to ``dataclasses.dataclass`` unchanged. Type checkers read ``record`` as ``dataclasses.dataclass``.
"""

from __future__ import annotations

import abc
import copy
import dataclasses
import re
import sys
from _thread import get_ident
from operator import attrgetter
from types import MemberDescriptorType, MethodType
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


# --- __init__, generated only when it is needed -------------------------------------------------------------

_MISSING = dataclasses.MISSING
_CLASS_VARIABLE = getattr(dataclasses, "_FIELD_CLASSVAR", None)  # a ClassVar pseudo-field's kind (no init param)


def _generated_init(cls: type, post_init: bool, qualname: str) -> Any:
    """The ``__init__`` ``@dataclass`` generates for CLS's fields, made by ``dataclasses`` itself.

    It is built on a field-only twin of CLS (same module, QUALNAME as at decoration, fields in the same order,
    ``__post_init__`` when CLS had one at decoration), so it is compiled exactly as for CLS (frozen False:
    the assignments go through CLS's own ``__setattr__``, as for every record) without CLS being processed
    twice. Copies of the fields: ``dataclasses`` sets a field's name and kind on the object it reads."""
    everything = cls.__dataclass_fields__  # type: ignore[attr-defined]
    annotations = {name: f.type for name, f in everything.items()}
    twin = type(cls.__name__, (), {"__module__": cls.__module__, "__qualname__": qualname, "__doc__": "-"})
    twin.__annotations__ = annotations
    for name, f in everything.items():  # set after the class exists: no __set_name__ runs a second time
        setattr(twin, name, copy.copy(f))
    if post_init:
        twin.__post_init__ = None  # type: ignore[attr-defined]  # only its presence is read
    dataclasses.dataclass(twin, repr=False, eq=False, match_args=False)
    return vars(twin)["__init__"]


def _install_init(cls: type) -> Any:
    """CLS's generated ``__init__``, put in the class in place of its stand-in (once)."""
    init = vars(cls).get("__init__")
    if isinstance(init, _DeferredInit):
        init = _generated_init(cls, init.post_init, init.qualname)
        type.__setattr__(cls, "__init__", init)
    return init


def _binding_init(cls: type, fields: tuple[dataclasses.Field[Any], ...], post_init: bool) -> Any:
    """An ``__init__`` that binds a call as the generated one would and assigns in its order, or hands the
    call to the generated one (built then) whenever binding would fail, so that one raises its own error."""
    positional = tuple(f.name for f in fields if f.init and not f.kw_only)
    parameters = frozenset(f.name for f in fields if f.init)
    required = frozenset(f.name for f in fields if f.init and f.default is _MISSING and f.default_factory is _MISSING)
    # What the generated body assigns, in field order: each parameter (its default or factory when not
    # given), and each init=False field with a default factory. An init=False field with a plain default
    # is read from the class, never assigned.
    steps = tuple(
        (f.name, f.init, f.default, f.default_factory) for f in fields if f.init or f.default_factory is not _MISSING
    )
    most = len(positional)

    def __init__(self: Any, /, *args: Any, **kwargs: Any) -> None:
        if len(args) > most:
            return _install_init(cls)(self, *args, **kwargs)
        given = dict(zip(positional, args, strict=False))  # args may be fewer
        for name in kwargs:
            if name in given or name not in parameters:
                return _install_init(cls)(self, *args, **kwargs)
        given.update(kwargs)
        if not required.issubset(given):
            return _install_init(cls)(self, *args, **kwargs)
        for name, init, default, factory in steps:
            if init and name in given:
                setattr(self, name, given[name])
            elif factory is not _MISSING:
                setattr(self, name, factory())
            else:
                setattr(self, name, default)
        if post_init:
            self.__post_init__()
        return None

    return _name(cls, __init__)


class _DeferredInit:
    """A record's ``__init__`` until the generated one is needed (module docstring).

    Read from an instance (every construction, ``super().__init__``): the binding ``__init__`` bound to
    it. Read from the class (``Cls.__init__``, ``inspect.signature(Cls)``): the generated one, now built
    and in the class for good."""

    __slots__ = ("binding", "owner", "post_init", "qualname")

    def __init__(self, owner: type, binding: Any, post_init: bool) -> None:
        self.owner, self.binding, self.post_init = owner, binding, post_init
        self.qualname = owner.__qualname__  # the generated __init__ is named as at decoration

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return _install_init(self.owner)
        return MethodType(self.binding, instance)


def _defer_init(cls: type, fields: tuple[dataclasses.Field[Any], ...], post_init: bool) -> None:
    """Give CLS (made by ``dataclasses`` with init=False) its ``__init__``: the deferred stand-in when its
    fields allow it, else the generated one now (``dataclasses``' own refusal of a bad field order raised)."""
    cls.__dataclass_params__.init = True  # type: ignore[attr-defined]  # as @dataclass records it
    everything = cls.__dataclass_fields__  # type: ignore[attr-defined]
    real = {f.name for f in fields}
    pseudo = [f for f in everything.values() if f.name not in real] if len(everything) > len(real) else []
    simple = _CLASS_VARIABLE is not None and all(getattr(f, "_field_type", None) is _CLASS_VARIABLE for f in pseudo)
    seen_default = False
    for f in fields:
        if f.init and not f.kw_only:
            if f.default is not _MISSING or f.default_factory is not _MISSING:
                seen_default = True
            elif seen_default:
                simple = False  # dataclasses refuses it: let it raise, with its own words
    if simple:
        type.__setattr__(cls, "__init__", _DeferredInit(cls, _binding_init(cls, fields, post_init), post_init))
    else:
        type.__setattr__(cls, "__init__", _generated_init(cls, post_init, cls.__qualname__))


# --- the fields, without dataclasses' per-annotation checks where none can apply -----------------------------

# dataclasses' own test of a string annotation's head (``dataclasses._MODULE_IDENTIFIER_RE``): [module.]name
_HEAD = re.compile(r"^(?:\s*(\w+)\s*\.)?\s*(\w+)")
_FIELD_KIND = getattr(dataclasses, "_FIELD", None)  # what marks a real field for dataclasses.fields
# Made for CPython 3.11's dataclasses._process_class (read and matched line by line); elsewhere dataclasses does it.
_ORDINARY = sys.version_info[:2] == (3, 11) and _FIELD_KIND is not None


# What @dataclass(repr=False, eq=False) records in ``__dataclass_params__`` (every record's, copied), read
# from a throwaway class: only the parameters are kept, so kvdoctor has no plain dataclass of its own here.
_PARAMETERS = dataclasses.dataclass(repr=False, eq=False)(
    type("_Parameters", (), {"__doc__": "-"})
).__dataclass_params__


def _ordinary(annotation: object, namespace: dict[str, Any]) -> bool:
    """True when dataclasses could not read ANNOTATION as ClassVar, InitVar or KW_ONLY (``_is_type``):
    a string whose head names nothing in the class's module, or a class there that is none of them."""
    if isinstance(annotation, str):
        match = _HEAD.match(annotation)
        if match is None:
            return True
        prefix, head = match.groups()
        if prefix:
            return namespace.get(prefix) not in (sys.modules.get("typing"), dataclasses)
        annotation = namespace.get(head)
        if annotation is None:
            return True
    return isinstance(annotation, type) and annotation not in (dataclasses.InitVar, dataclasses.KW_ONLY)


def _ordinary_fields(cls: type, own: dict[str, Any]) -> dict[str, dataclasses.Field[Any]] | None:
    """CLS's fields as ``dataclasses`` would make them, when each is an ordinary field; else None (and CLS
    untouched), for ``dataclasses`` to make (or refuse) them itself."""
    module = sys.modules.get(cls.__module__)
    if module is None or any(hasattr(base, "__dataclass_fields__") for base in cls.__mro__[1:]):
        return None
    namespace = vars(module)
    annotations = own.get("__annotations__", {})
    made = []
    for name, annotation in annotations.items():
        if not _ordinary(annotation, namespace):
            return None
        default = getattr(cls, name, _MISSING)
        if isinstance(default, dataclasses.Field):
            made_field = default
        elif isinstance(default, MemberDescriptorType):
            return None  # a slot: dataclasses' own reading
        else:
            made_field = dataclasses.field(default=default)
        if made_field.default.__class__.__hash__ is None:
            return None  # a mutable default: dataclasses refuses it, in its own words
        made.append((name, annotation, made_field))
    if any(isinstance(value, dataclasses.Field) and name not in annotations for name, value in own.items()):
        return None  # a field without an annotation: dataclasses refuses it
    fields = {}
    for name, annotation, f in made:
        f.name, f.type, f._field_type = name, annotation, _FIELD_KIND  # type: ignore[attr-defined]
        if f.kw_only is _MISSING:  # type: ignore[comparison-overlap]
            f.kw_only = False
        fields[name] = f
        if isinstance(getattr(cls, name, None), dataclasses.Field):  # the class attribute is the default
            if f.default is _MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, f.default)
    return fields


def _give_fields(cls: type, fields: dict[str, dataclasses.Field[Any]]) -> None:
    """What dataclasses._process_class sets besides the methods record writes (CPython 3.11)."""
    cls.__dataclass_params__ = copy.copy(_PARAMETERS)  # type: ignore[attr-defined]
    cls.__dataclass_fields__ = fields  # type: ignore[attr-defined]
    if "__match_args__" not in vars(cls):
        cls.__match_args__ = tuple(f.name for f in fields.values() if f.init and not f.kw_only)  # type: ignore[attr-defined]
    abc.update_abstractmethods(cls)


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
    # __init__ deferred (module docstring): not for a class whose docstring dataclasses writes from it.
    deferred = options.get("init", True) and "__init__" not in own and bool(own.get("__doc__"))
    post_init = hasattr(cls, "__post_init__")  # read at decoration, as dataclasses reads it
    ordinary = _ordinary_fields(cls, own) if _ORDINARY and deferred and not options else None
    if ordinary is not None:
        _give_fields(cls, ordinary)
    else:
        dataclasses.dataclass(cls, repr=False, eq=False, frozen=False, **{**options, "init": not deferred})
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if deferred:
        _defer_init(cls, fields, post_init)
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
