"""A sweep's space: the server flags that change how a request's state is kept, and the values each one takes.

A :class:`Factor` is one flag: the values the sweep tries, the server's own default (what a launch line without the
flag gets), why it matters to a request's state, and whether only a PD deployment reads it. A :class:`Space` is the
factors of one server. A :class:`Configuration` is one value per factor; its launch words name only the flags whose
value differs from the server's default, so a configuration equal to the defaults is the bare launch line.

A user's own space is a small TOML file (:func:`read_toml`; ``docs/sweep.md``, ``kvdoctor schema sweep-space``)::

    server = "sglang"

    [[factor]]
    flag = "--page-size"
    values = [1, 16]
    default = 1                 # the server's own default; left out: the server decides (the flag is not given)
    why = "the KV page a request's tokens are allocated in"
    # topology = "pd"           # only a PD deployment reads it

Every flag must be one the server's own parser takes, and every value one it accepts (read from the server's
generated flag table): a typo is exit 2 before anything launches.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kvdoctor._exceptions import FlagError, InputError
from kvdoctor.core.flag_values import ValueCheck, ValueGrammar
from kvdoctor.core.record import record

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML with tomli, tomllib's own source
    import tomli as tomllib

__all__ = ["Configuration", "Factor", "Space", "Value", "read_toml"]

Value = bool | int | float | str
TOPOLOGIES = ("pd", "single")


@record(frozen=True)
class Factor:
    """One server flag the sweep varies. A switch (a flag that takes no value) takes ``False`` and ``True``."""

    flag: str
    values: tuple[Value, ...]
    default: Value | None = None  # the server's own default (None: left out, the server decides at start-up)
    why: str = ""  # the state path it moves, one line
    topology: str | None = None  # "pd": only a PD deployment reads it (None: every deployment)
    shared: bool = False  # the reference runs the same value: it changes the numbers a correct server computes

    @property
    def switch(self) -> bool:
        return all(isinstance(v, bool) for v in self.values) and self.default in (None, False)

    def words(self, value: Value) -> tuple[str, ...]:
        """The launch words that set VALUE (none for the default: the bare launch line has it)."""
        if value is None or (value == self.default and type(value) is type(self.default)):
            return ()
        if self.switch:  # off: nothing when off is the default, else the flag's inverse (vLLM's --no-X)
            return (self.flag,) if value else (() if self.default is False else (self.inverse,))
        return (self.flag, _text(value))

    @property
    def inverse(self) -> str:
        """A switch's off form, ``--no-X`` (a server whose default is neither on nor off takes it: vLLM's)."""
        return f"--no-{self.flag[2:]}"


def _text(value: Value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@record(frozen=True)
class Configuration:
    """One value per factor of a space, in the space's order."""

    values: tuple[tuple[str, Value], ...]  # (flag, value)

    def get(self, flag: str) -> Value:
        return dict(self.values)[flag]

    def changed(self, space: Space) -> tuple[str, ...]:
        """The flags whose value differs from the server's default, in the space's order."""
        return tuple(f.flag for f in space.factors if f.words(self.get(f.flag)))

    def label(self, space: Space) -> str:
        """How a table names it: the changed flags and their values, or ``defaults``."""
        words = [w for f in space.factors for w in f.words(self.get(f.flag))]
        return " ".join(words) or "defaults"

    def argv(self, space: Space) -> tuple[str, ...]:
        """The server launch words of this configuration: only the flags that differ from the defaults."""
        return tuple(w for f in space.factors for w in f.words(self.get(f.flag)))

    def subject_argv(self, space: Space) -> tuple[str, ...]:
        """The words the subject alone runs (what the sweep tests)."""
        return tuple(w for f in space.factors if not f.shared for w in f.words(self.get(f.flag)))

    def shared_argv(self, space: Space) -> tuple[str, ...]:
        """The words the reference runs too (factors that change the numbers, not the state path)."""
        return tuple(w for f in space.factors if f.shared for w in f.words(self.get(f.flag)))

    def with_defaults(self, space: Space, keep: Iterable[str]) -> Configuration:
        """This configuration with every flag but KEEP set back to its default (the minimizer's probe)."""
        kept = set(keep)
        return Configuration(tuple((f.flag, self.get(f.flag) if f.flag in kept else f.default) for f in space.factors))

    def toward(self, other: Configuration, keep: Iterable[str]) -> Configuration:
        """This configuration with OTHER's value for each flag in KEEP (the minimizer's probe from a green
        configuration toward a red one)."""
        kept = set(keep)
        return Configuration(tuple((flag, other.get(flag) if flag in kept else v) for flag, v in self.values))

    def differs(self, other: Configuration) -> tuple[str, ...]:
        """The flags whose value differs from OTHER's, in order."""
        return tuple(flag for flag, v in self.values if other.get(flag) != v or type(other.get(flag)) is not type(v))

    def shown(self, space: Space, flags: Iterable[str]) -> str:
        """FLAGS with this configuration's values, as a person reads them (a switch given, or ``left out``)."""
        out = []
        for flag in flags:
            f, v = space.factor(flag), self.get(flag)
            if f.switch:
                out.append(" ".join(f.words(v)) or f"{flag} left out")  # --X, --no-X (vLLM), or neither
            else:
                out.append(f"{flag} {'left out' if v is None else _text(v)}")
        return ", ".join(out)


@record(frozen=True)
class Space:
    """The factors of one server's sweep, and where they came from (``built-in`` or the TOML file's path)."""

    server: str
    factors: tuple[Factor, ...]
    source: str = "built-in"

    def factor(self, flag: str) -> Factor:
        for f in self.factors:
            if f.flag == flag:
                return f
        raise KeyError(flag)

    def defaults(self) -> Configuration:
        return Configuration(tuple((f.flag, f.default) for f in self.factors))

    def configuration(self, values: Mapping[str, Value]) -> Configuration:
        """The configuration with VALUES (flag -> value), every other flag at its default."""
        unknown = sorted(set(values) - {f.flag for f in self.factors})
        if unknown:
            raise KeyError(", ".join(unknown))
        return Configuration(tuple((f.flag, values.get(f.flag, f.default)) for f in self.factors))

    def for_topology(self, topology: str) -> Space:
        """The factors a TOPOLOGY deployment reads (a PD-only flag leaves a single server's space)."""
        kept = tuple(f for f in self.factors if f.topology in (None, topology))
        return Space(self.server, kept, self.source)

    def check(self, grammar: Callable[[str], ValueGrammar | None], known: Callable[[str], bool]) -> None:
        """Every flag one the server's parser takes and every value one it accepts (``FlagError``, exit 2)."""
        checker = ValueCheck("sweep space")
        for f in self.factors:
            if not known(f.flag):
                raise FlagError(f"sweep space ({self.source}): {f.flag} is not a {self.server} server flag")
            if f.switch and f.default is None and False in f.values and not known(f.inverse):
                raise FlagError(
                    f"sweep space ({self.source}): {f.flag} has no {f.inverse}: give default = false (off is the "
                    "flag left out)"
                )
            values = () if f.switch else tuple(_text(v) for v in (*f.values, f.default) if v is not None)
            checker.check(f.flag, values, grammar(f.flag))


_FACTOR_KEYS = frozenset({"flag", "values", "default", "why", "topology", "shared"})


def _value(v: object, where: str) -> Value:
    if isinstance(v, bool | int | float | str):
        return v
    raise InputError(f"{where}: a value is a string, a number or true/false, not {type(v).__name__}")


def _factor(table: object, where: str) -> Factor:
    if not isinstance(table, dict):
        raise InputError(f"{where}: each [[factor]] is a table")
    unknown = sorted(set(table) - _FACTOR_KEYS)
    if unknown:
        raise InputError(f"{where}: unknown key {unknown[0]!r} (keys: {', '.join(sorted(_FACTOR_KEYS))})")
    flag, values = table.get("flag"), table.get("values")
    if not isinstance(flag, str) or not flag.startswith("--"):
        raise InputError(f'{where}: flag must be the server\'s option string, such as "--page-size"')
    if not isinstance(values, list) or len(values) < 2:
        raise InputError(f"{where} ({flag}): values must list at least two values to try")
    tried = tuple(_value(v, f"{where} ({flag})") for v in values)
    if len(set(tried)) != len(tried):
        raise InputError(f"{where} ({flag}): a value is listed twice")
    topology = table.get("topology")
    if topology is not None and topology not in TOPOLOGIES:
        raise InputError(f"{where} ({flag}): topology is one of {', '.join(TOPOLOGIES)}")
    why = table.get("why", "")
    if not isinstance(why, str):
        raise InputError(f"{where} ({flag}): why is a string")
    default = _value(table["default"], f"{where} ({flag})") if "default" in table else None
    shared = table.get("shared", False)
    if not isinstance(shared, bool):
        raise InputError(f"{where} ({flag}): shared is true or false")
    return Factor(flag, tried, default, why, topology, shared)


def read_toml(path: Path) -> Space:
    """The space in the TOML file at PATH (exit 2 naming the file and the key on anything malformed)."""
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"--space {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InputError(f"--space {path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"--space {path}: not TOML: {exc}") from None
    unknown = sorted(set(data) - {"server", "factor"})
    if unknown:
        raise InputError(f"--space {path}: unknown key {unknown[0]!r} (keys: server, factor)")
    server = data.get("server")
    if not isinstance(server, str):
        raise InputError(f'--space {path}: server must name the server the flags are for ("sglang", "vllm")')
    tables = data.get("factor")
    if not isinstance(tables, list) or not tables:
        raise InputError(f"--space {path}: no [[factor]] tables")
    factors = tuple(_factor(t, f"--space {path}, factor {i + 1}") for i, t in enumerate(tables))
    flags = [f.flag for f in factors]
    if len(set(flags)) != len(flags):
        twice = next(f for f in flags if flags.count(f) > 1)
        raise InputError(f"--space {path}: {twice} is listed twice")
    return Space(server, factors, str(path))


def configurations(space: Space, rows: Sequence[Mapping[str, Value]]) -> tuple[Configuration, ...]:
    """ROWS (flag -> value) as configurations of SPACE, in order, each once."""
    return tuple(dict.fromkeys(space.configuration(r) for r in rows))
