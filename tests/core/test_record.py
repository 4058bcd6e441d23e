"""``kvdoctor.core.record``: the same classes as ``dataclasses.dataclass`` makes, without its compiled methods.

Every case defines one class twice, once under ``@dataclass`` and once under ``@record`` with the same
arguments, runs the same operations on both and compares what came out: the values, and for an operation
that raises, the exception's type and message. A difference in any method ``record`` writes itself
(``__repr__``, ``__eq__``, ``__hash__``, the frozen ``__setattr__`` / ``__delattr__``) fails here, and so
does one in what ``record`` makes without ``dataclasses``: the deferred ``__init__`` (each call bound, or
refused, as the generated one binds it) and a class's ordinary fields.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import re
import sys
import typing
from collections.abc import Callable
from dataclasses import FrozenInstanceError, InitVar, dataclass, field
from functools import partial
from typing import Any, ClassVar

import pytest

from kvdoctor.core.record import record

Decorator = Callable[..., Any]


def _outcome(run: Callable[[], Any]) -> Any:
    """What RUN returned, or the type and message of what it raised (a class named without its tag)."""
    try:
        return ("value", run())
    except Exception as exc:
        return ("raised", type(exc), re.sub(r"_(dc|rec)\b", "", str(exc)))


def _module_level(cls: type) -> type:
    """CLS as a module-level class of this module (pickle finds a class by its qualified name)."""
    cls.__qualname__ = cls.__name__
    setattr(sys.modules[__name__], cls.__name__, cls)
    return cls


def _shapes(make: Decorator, tag: str) -> dict[str, type]:
    @make(frozen=True)
    class Point:
        """A frozen pair."""

        x: int
        y: str = "a"

    @make(frozen=True)
    class Fields:
        """Defaults, factories, fields kept out of repr, compare and hash, a ClassVar and an InitVar."""

        kept: int
        hidden: str = field(default="h", repr=False)
        loose: float = field(default=0.5, compare=False)
        unhashed: int = field(default=3, hash=False)
        hashed_only: int = field(default=4, compare=False, hash=True)
        items: list[int] = field(default_factory=list, hash=False)
        later: int = field(init=False, default=7)
        computed: int = field(init=False)
        scale: InitVar[int] = 2
        shared: ClassVar[str] = "class"

        def __post_init__(self, scale: int) -> None:
            object.__setattr__(self, "computed", self.kept * scale)

    @make
    class Mutable:
        a: int
        b: list[int] = field(default_factory=list)

    @make(frozen=True)
    class Base:
        """A frozen base."""

        a: int

    @make(frozen=True)
    class Child(Base):
        b: int = 0

    class Plain(Base):  # not a dataclass: only the base's fields are frozen
        pass

    @make(frozen=True)
    class Own:
        """Its own __repr__, __eq__ (so no __hash__ of its own) and an explicit __hash__ elsewhere."""

        a: int

        def __repr__(self) -> str:
            return "own"

        def __eq__(self, other: object) -> bool:
            return True

    @make(frozen=True)
    class Hashed:
        a: int

        def __hash__(self) -> int:
            return 42

    @make(eq=False, frozen=True)
    class NoEq:
        a: int

    @make(repr=False)
    class NoRepr:
        a: int

    @make(frozen=True, kw_only=True)
    class KwOnly:
        a: int
        b: int = 1

    @make(frozen=True)
    class Empty:
        pass

    @make
    class Node:
        value: int
        next: Any = None

    made = {
        c.__name__: c
        for c in (Point, Fields, Mutable, Base, Child, Plain, Own, Hashed, NoEq, NoRepr, KwOnly, Empty, Node)
    }
    for name, cls in made.items():
        cls.__name__ = f"{name}_{tag}"
        _module_level(cls)
    return made


def _scenarios(c: dict[str, type]) -> dict[str, Callable[[], Any]]:
    def loop() -> Any:
        node = c["Node"](1)
        node.next = node
        return repr(node).replace(c["Node"].__name__, "Node")

    def named(text: str) -> str:
        for cls in c.values():
            text = text.replace(cls.__name__, cls.__name__.rsplit("_", 1)[0])
        return text

    p, f = c["Point"](1, "b"), c["Fields"](5, items=[1])
    child = c["Child"](1, 2)
    plain = c["Plain"](1)

    def assign(obj: Any, name: str, value: Any = 9) -> Any:
        setattr(obj, name, value)
        return getattr(obj, name)

    def delete(obj: Any, name: str) -> Any:
        delattr(obj, name)
        return hasattr(obj, name)

    return {
        "repr": lambda: named(repr(p)),
        "repr fields": lambda: named(repr(f)),
        "repr mutable": lambda: named(repr(c["Mutable"](1, [2]))),
        "repr child": lambda: named(repr(child)),
        "repr kw_only": lambda: named(repr(c["KwOnly"](a=1))),
        "repr empty": lambda: named(repr(c["Empty"]())),
        "repr recursive": loop,
        "repr own": lambda: repr(c["Own"](1)),
        "no repr": lambda: repr(c["NoRepr"](1)).startswith("<"),
        "eq": lambda: (p == c["Point"](1, "b"), p == c["Point"](2, "b"), p != c["Point"](1, "c")),
        "eq ignores compare=False": lambda: f == c["Fields"](5, loose=9.0, items=[1]),
        "eq other class": lambda: (p == (1, "b"), p.__eq__((1, "b")), child == c["Base"](1)),
        "eq subclass instance": lambda: c["Base"](1) == c["Plain"](1),
        "eq mutable": lambda: c["Mutable"](1, [2]) == c["Mutable"](1, [2]),
        "eq nan is itself": lambda: (lambda n: c["Point"](n) == c["Point"](n))(float("nan")),
        "eq own": lambda: c["Own"](1) == c["Own"](2),
        "eq empty": lambda: c["Empty"]() == c["Empty"](),
        "no eq": lambda: (c["NoEq"](1) == c["NoEq"](1), hash(c["NoEq"](1)) != 0),
        "hash": lambda: (hash(p) == hash(c["Point"](1, "b")), hash(p) == hash((1, "b"))),
        "hash fields": lambda: hash(f) == hash((5, "h", 4, 7, 10)),
        "hash empty": lambda: hash(c["Empty"]()) == hash(()),
        "hash mutable": lambda: hash(c["Mutable"](1)),
        "hash own eq": lambda: hash(c["Own"](1)) == hash((1,)),
        "hash explicit": lambda: hash(c["Hashed"](1)),
        "in a set": lambda: len({p, c["Point"](1, "b"), c["Point"](2)}),
        "set field": lambda: assign(p, "x"),
        "set new attribute": lambda: assign(p, "z"),
        "set init=False field": lambda: assign(f, "later"),
        "set post_init field": lambda: assign(f, "computed"),
        "delete field": lambda: delete(p, "x"),
        "delete missing": lambda: delete(p, "nothing"),
        "set child's base field": lambda: assign(child, "a"),
        "set plain subclass field": lambda: assign(plain, "a"),
        "set plain subclass other": lambda: assign(plain, "extra", 3),
        "delete plain subclass other": lambda: (assign(plain, "extra2", 3), delete(plain, "extra2")),
        "set mutable": lambda: assign(c["Mutable"](1), "a", 5),
        "post_init": lambda: (f.computed, f.later, c["Fields"](3, scale=10).computed),
        "defaults": lambda: (c["Fields"](1).items, c["Fields"](1).items is not c["Fields"](1).items),
        "init refuses init=False": lambda: c["Fields"](1, later=2),
        "kw_only refuses positional": lambda: c["KwOnly"](1),
        "missing argument": lambda: c["Point"](),
        "fields": lambda: [(x.name, x.repr, x.compare, x.hash, x.init) for x in dataclasses.fields(f)],
        "match_args": lambda: (c["Point"].__match_args__, c["Child"].__match_args__, c["KwOnly"].__match_args__),
        "signature": lambda: named(str(inspect.signature(c["Fields"]))),
        "docstring": lambda: named(c["Mutable"].__doc__ or ""),
        "asdict": lambda: dataclasses.asdict(f),
        "replace": lambda: named(repr(dataclasses.replace(p, y="z"))),
        "replace frozen child": lambda: named(repr(dataclasses.replace(child, b=5))),
        "copy": lambda: (copy.copy(p) == p, copy.deepcopy(f) == f, copy.deepcopy(f) is not f),
        "pickle": lambda: pickle.loads(pickle.dumps(f)) == f,
        "pickled still frozen": lambda: assign(pickle.loads(pickle.dumps(p)), "x"),
        "is_dataclass": lambda: (dataclasses.is_dataclass(p), dataclasses.is_dataclass(c["Point"])),
        "method names": lambda: named(
            " ".join(getattr(c["Point"], m).__qualname__ for m in ("__repr__", "__eq__", "__hash__", "__setattr__"))
        ),
    }


@pytest.fixture(scope="module")
def both() -> tuple[dict[str, Callable[[], Any]], dict[str, Callable[[], Any]]]:
    return _scenarios(_shapes(dataclass, "dc")), _scenarios(_shapes(record, "rec"))


def test_every_operation_behaves_as_under_dataclass(both: Any) -> None:
    expected, got = both
    assert list(expected) == list(got)
    differ = {name: (_outcome(expected[name]), _outcome(got[name])) for name in expected}
    differ = {name: pair for name, pair in differ.items() if pair[0] != pair[1]}
    assert differ == {}


def test_the_scenarios_reach_what_they_test(both: Any) -> None:
    """The comparison above is not vacuous: refusals raise, values are what dataclasses gives."""
    _, got = both
    assert _outcome(got["set field"]) == ("raised", FrozenInstanceError, "cannot assign to field 'x'")
    assert _outcome(got["delete field"]) == ("raised", FrozenInstanceError, "cannot delete field 'x'")
    assert _outcome(got["set new attribute"])[:2] == ("raised", FrozenInstanceError)
    assert _outcome(got["set plain subclass other"]) == ("value", 3)
    assert _outcome(got["hash mutable"])[:2] == ("raised", TypeError)
    assert _outcome(got["repr recursive"]) == ("value", "Node(value=1, next=...)")
    assert _outcome(got["repr fields"]) == (
        "value",
        "Fields(kept=5, loose=0.5, unhashed=3, hashed_only=4, items=[1], later=7, computed=10)",
    )
    assert _outcome(got["hash fields"]) == ("value", True)


def test_record_compiles_no_method_but_init() -> None:
    """The shared methods are closures of one code object each: nothing compiled per class (the saving)."""

    @record(frozen=True)
    class One:
        a: int

    @record(frozen=True)
    class Two:
        b: str

    for method in ("__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__"):
        assert getattr(One, method).__code__ is getattr(Two, method).__code__, method
    assert One.__init__.__code__ is not Two.__init__.__code__  # dataclasses' own, compiled for its fields


def test_mixing_frozen_and_not_is_refused_as_dataclasses_refuses() -> None:
    @record(frozen=True)
    class Frozen:
        a: int

    @record
    class Thawed:
        a: int

    with pytest.raises(TypeError, match="cannot inherit non-frozen dataclass from a frozen one"):
        record(type("Sub", (Frozen,), {"__annotations__": {"b": "int"}}))
    with pytest.raises(TypeError, match="cannot inherit frozen dataclass from a non-frozen one"):
        record(frozen=True)(type("Sub", (Thawed,), {"__annotations__": {"b": "int"}}))
    with pytest.raises(TypeError, match="Cannot overwrite attribute __setattr__ in class Sets"):
        record(frozen=True)(type("Sets", (), {"__annotations__": {"a": "int"}, "__setattr__": object.__setattr__}))


def test_what_record_has_no_cheaper_form_of_is_dataclasses_own() -> None:
    @record(order=True, frozen=True)
    class Ordered:
        a: int

    @dataclass(frozen=True)
    class PlainBase:
        a: int

    @record(frozen=True)
    class OnPlain(PlainBase):
        b: int = 0

    assert Ordered(1) < Ordered(2) and Ordered.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert OnPlain.__dataclass_params__.frozen and OnPlain(1) == OnPlain(1)  # type: ignore[attr-defined]


# --- The deferred __init__ and the ordinary fields (issue 17: start-up) -------------------------------------

CV = ClassVar  # an alias: dataclasses reads "CV[int]" as a ClassVar by looking its head up in this module


def _kinds(make: Decorator) -> dict[str, type]:
    """Fresh classes, nothing yet read from them: each shape of __init__ the deferred stand-in binds."""

    @make(frozen=True)
    class Plain:
        """Positional fields, a default and a default factory."""

        a: int
        b: str = "b"
        items: list[int] = field(default_factory=list)

    @make
    class Later:
        """init=False fields (a factory, a plain default), a keyword-only field and __post_init__."""

        a: int
        made: list[int] = field(init=False, default_factory=list)
        fixed: int = field(init=False, default=3)
        k: int = field(default=0, kw_only=True)

        def __post_init__(self) -> None:
            self.made.append(self.a)

    @make(frozen=True)
    class Selfish:
        """A field named self."""

        self: int
        other: int = 2

    @make(frozen=True)
    class Aliased:
        """Annotations dataclasses reads as ClassVar, through an alias and a module prefix: no fields."""

        shared: CV[int] = 1
        also: typing.ClassVar[str] = "s"
        a: int = 0

    return {"Plain": Plain, "Later": Later, "Selfish": Selfish, "Aliased": Aliased}


CALLS: dict[str, list[tuple[tuple[Any, ...], dict[str, Any]]]] = {
    "Plain": [
        ((1,), {}),
        ((1, "x", [2]), {}),
        ((), {"a": 1, "items": [3]}),
        ((1,), {"items": None, "b": "q"}),
        ((), {}),
        ((1, 2, 3, 4), {}),
        ((1,), {"a": 2}),
        ((1,), {"nope": 2}),
    ],
    "Later": [((1,), {}), ((1,), {"k": 5}), ((1, 5), {}), ((1,), {"made": []}), ((1,), {"fixed": 1}), ((), {"k": 1})],
    "Selfish": [((1,), {}), ((), {"self": 3, "other": 4}), ((), {"other": 1})],
    "Aliased": [((), {}), ((5,), {}), ((1, 2), {})],
}


def _construct(make: Decorator, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A fresh class NAME made by MAKE, called once: what its instance holds, in the order it was assigned."""
    return list(vars(_kinds(make)[name](*args, **kwargs)).items())


@pytest.mark.parametrize("name", sorted(CALLS))
def test_the_deferred_init_binds_and_refuses_each_call_as_the_generated_one(name: str) -> None:
    """Each call on a fresh class (the stand-in's first call): the same fields, assigned in the same order, or
    the same TypeError (handed to the generated __init__, in its own words)."""
    for args, kwargs in CALLS[name]:
        expected = _outcome(partial(_construct, dataclass, name, args, kwargs))
        assert _outcome(partial(_construct, record, name, args, kwargs)) == expected, (args, kwargs)
    refused = [_outcome(partial(_construct, record, name, *call))[0] == "raised" for call in CALLS[name]]
    assert any(refused) and not all(refused)  # both paths are reached: bound, and handed over


def test_the_generated_init_is_built_only_when_read_from_the_class() -> None:
    rec, dc = _kinds(record)["Plain"], _kinds(dataclass)["Plain"]
    assert rec(1) == rec(1, "b", [])
    assert not inspect.isfunction(vars(rec)["__init__"])  # constructing compiled nothing
    assert str(inspect.signature(rec)) == str(inspect.signature(dc))
    assert inspect.isfunction(vars(rec)["__init__"])  # read from the class: the generated one, kept there
    assert rec.__init__.__qualname__ == dc.__init__.__qualname__
    assert rec.__init__.__annotations__ == dc.__init__.__annotations__
    assert repr(rec.__init__.__defaults__) == repr(dc.__init__.__defaults__)
    assert rec(1, "x") == rec(1, "x") and rec(1).items == []


def _as_record_records(cls: type | None = None, /, **options: Any) -> Any:
    """``dataclass`` with what ``record`` passes it (repr, eq and frozen its own): the reference for the fields."""

    def wrap(cls: type) -> type:
        return dataclass(cls, repr=False, eq=False, frozen=False)

    return wrap if cls is None else wrap(cls)


def _field_facts(cls: type) -> Any:
    every = cls.__dataclass_fields__.values()  # type: ignore[attr-defined]
    return [(f.name, f.type, f.default, f.default_factory, f.init, f.repr, f.hash) for f in every] + [
        (f.compare, dict(f.metadata), f.kw_only, f._field_type)  # type: ignore[attr-defined]
        for f in every
    ]


def test_ordinary_fields_are_what_dataclasses_makes(monkeypatch: pytest.MonkeyPatch) -> None:
    import kvdoctor.core.record as module

    took: dict[str, bool] = {}
    real = module._ordinary_fields

    def spy(cls: type, own: dict[str, Any]) -> Any:
        made = real(cls, own)
        took[cls.__name__] = made is not None
        return made

    monkeypatch.setattr(module, "_ordinary_fields", spy)
    rec, ref = _kinds(record), _kinds(_as_record_records)
    if module._ORDINARY:  # CPython 3.11; elsewhere dataclasses makes every record's fields
        assert took == {"Plain": True, "Later": True, "Selfish": True, "Aliased": False}
    for name, cls in rec.items():
        other = ref[name]
        assert _field_facts(cls) == _field_facts(other), name
        assert repr(cls.__dataclass_params__) == repr(other.__dataclass_params__), name  # type: ignore[attr-defined]
        assert cls.__match_args__ == other.__match_args__, name  # type: ignore[attr-defined]
        names = [*cls.__dataclass_fields__, "__abstractmethods__"]  # type: ignore[attr-defined]
        assert {n: vars(cls)[n] for n in names if n in vars(cls)} == {
            n: vars(other)[n] for n in names if n in vars(other)
        }
        assert [repr(f) for f in dataclasses.fields(cls)] == [repr(f) for f in dataclasses.fields(other)]


@pytest.mark.parametrize(
    "namespace",
    [
        {"__annotations__": {"a": "list[int]"}, "a": []},  # a mutable default
        {"__annotations__": {"a": "int", "b": "int"}, "a": 1},  # a default before a field without one
        {"__annotations__": {}, "a": field(default=1)},  # a field without an annotation
        {"__annotations__": {"a": "ClassVar[int]"}, "a": field(default_factory=list)},  # a ClassVar factory
    ],
    ids=["mutable default", "field order", "no annotation", "classvar factory"],
)
def test_what_dataclasses_refuses_record_refuses_in_its_words(namespace: dict[str, Any]) -> None:
    def made(make: Decorator) -> Any:
        return make(frozen=True)(type("Refused", (), {"__doc__": "A class dataclasses refuses.", **namespace}))

    expected = _outcome(partial(made, dataclass))
    assert expected[0] == "raised"
    assert _outcome(partial(made, record)) == expected
