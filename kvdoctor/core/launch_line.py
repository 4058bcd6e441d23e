"""Reading a pasted launch line the way the server's argparse reads it: the scanner both servers share.

SGLang's and vLLM's parsers read options alike: ``--flag=value``, a switch takes no value, a
multi-value flag takes every word up to the next option, a negative number is a value, not an
option. Only the vocabulary differs (which words are flags, how many values each takes, whether a
unique prefix or ``--snake_case`` spelling is accepted), so a server's room (``core/sglang/flags.py``,
``core/vllm/flags.py``) describes its parser once as a :class:`FlagVocabulary` and calls :func:`scan`
with it. The scanner never guesses a server: the vocabulary is always the caller's.

A pasted launcher (``python -m sglang.launch_server``, ``vllm serve``, ...) is found by
:func:`split_launcher`, given the server's launchers; environment assignments before it are dropped.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import field
from pathlib import PurePath

from kvdoctor._exceptions import FlagError
from kvdoctor.core.flag_values import ValueCheck, ValueGrammar
from kvdoctor.core.record import record
from kvdoctor.text import shown

# Patterns, not compiled ones: ``re`` compiles each on its first use (and keeps it), so a launch line
# without a pasted launcher or an option compiles none at start-up.
_PYTHON = r"python[0-9.]*"
_ENV_ASSIGNMENT = r"[A-Za-z_][A-Za-z0-9_]*=.*"
_NUMBER = r"-\.?[0-9]"  # "-1", "-0.5": a value, as argparse reads it, not an option

# A launcher: the program's name (``python`` matches python3, python3.12 and a path to either) and the
# words that must follow it: ("python", "-m", "sglang.launch_server"), ("vllm", "serve").
Launcher = tuple[str, ...]


@record(frozen=True)
class Option:
    """One option of a command line: the server flag it means, and the values it took."""

    name: str  # the server's full spelling (SGLang: a unique prefix expanded; vLLM: underscores as dashes)
    values: tuple[str, ...]

    @property
    def argv(self) -> list[str]:
        return [self.name, *self.values]


@record(frozen=True)
class Scan:
    """What a scan of the words found: the options in order, and the words that are no option."""

    options: tuple[Option, ...] = ()
    positionals: tuple[str, ...] = ()


@record(frozen=True)
class LaunchLine:
    """MODEL and the server flags of a command line, however the user wrote them."""

    model: str
    server_argv: tuple[str, ...] = ()
    launcher: str | None = None  # the pasted launcher ("python -m sglang.launch_server", "vllm serve"), if any


def is_option(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not re.match(_NUMBER, token)


def did_you_mean(word: str, candidates: Collection[str]) -> str:
    """``; did you mean X?`` for the candidate closest to WORD, or ""."""
    close = difflib.get_close_matches(word, sorted(candidates), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


@record(frozen=True)
class FlagVocabulary:
    """One server's flag grammar, as its argparse reads it: how a word resolves to a flag, and how many
    values each flag takes. SGLang's is ``core/sglang/flags.py``'s ``SGLANG``, vLLM's
    ``core/vllm/flags.py``'s ``VLLM``."""

    label: str  # how errors name the flags: "server flags", "vLLM flags"
    server: str  # who reads the words after '--': "SGLang", "vLLM"
    flag_kind: str  # an unknown word is "neither kvdoctor's nor <flag_kind>": "an SGLang 0.5.23 server flag"
    known: frozenset[str]  # every option string the server's parser registers
    switches: frozenset[str]  # take no value
    multi_value: frozenset[str]  # take every value up to the next option
    optional_value: frozenset[str]  # may take none
    values: Mapping[str, ValueGrammar] = field(default_factory=dict)  # each flag's type, nargs, choices
    # Flags kvdoctor models: its own parser reads their values first (with its own, stricter messages),
    # then check_values holds them to the server's grammar too; scan checks every other flag's values.
    modelled: frozenset[str] = frozenset()
    abbreviations: bool = False  # argparse's allow_abbrev: a unique prefix names its flag (SGLang)
    underscores: bool = False  # ``--max_model_len`` is ``--max-model-len`` (vLLM's FlexibleArgumentParser)

    def spelling(self, word: str) -> str:
        """WORD as the server's parser looks it up (underscores read as dashes where it does so)."""
        return "--" + word[2:].replace("_", "-") if self.underscores and word.startswith("--") else word

    def resolve(self, word: str, own_options: Collection[str] = ()) -> str:
        """WORD's full spelling in the server's vocabulary: itself, or the one flag it abbreviates.

        kvdoctor's own options never reach here unless they follow ``--``; one that the server also
        spells (``--device``) is then the server's, any other is refused rather than read as an
        abbreviation. An unknown word is a ``FlagError`` with a did-you-mean.
        """
        name = self.spelling(word)
        if name in self.known:
            return name
        if word in own_options:
            raise FlagError(
                f"{word} is kvdoctor's own option: put it before '--' (what follows '--' goes to {self.server})"
            )
        if self.abbreviations and word.startswith("--"):
            matches = sorted(f for f in self.known if f.startswith(name))  # vLLM: dashes first, then the prefix
            if len(matches) == 1:
                return matches[0]
            if matches:
                listed = ", ".join(matches[:5]) + (", ..." if len(matches) > 5 else "")
                raise FlagError(f"{self.label}: ambiguous option: {shown(word)} could match {listed}")
        raise FlagError(
            f"unknown option {shown(word)}: neither kvdoctor's nor {self.flag_kind}"
            f"{did_you_mean(name, {*own_options, *self.known})}"
        )

    def check(self, option: Option) -> None:
        """OPTION's values as the server's argparse converts them (``flag_values``): a ``FlagError``
        (exit 2) for a value it refuses, a choice it does not offer, or a list with no value."""
        ValueCheck(self.label).check(option.name, option.values, self.values.get(option.name))


def check_values(options: Sequence[Option], vocabulary: FlagVocabulary) -> None:
    """Hold every option's values to the server's grammar (after kvdoctor's own parser read the modelled ones)."""
    for option in options:
        vocabulary.check(option)


def scan(tokens: Sequence[str], vocabulary: FlagVocabulary, own_options: Collection[str] = ()) -> Scan:
    """Split TOKENS into options (with the values VOCABULARY's parser would give them) and positionals."""
    options: list[Option] = []
    positionals: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not is_option(token):
            positionals.append(token)
            continue
        word, eq, inline = token.partition("=")
        name = vocabulary.resolve(word, own_options)
        if eq and name in vocabulary.switches:
            raise FlagError(f"{vocabulary.label}: argument {name}: ignored explicit argument {shown(inline)!r}")
        if eq:
            options.append(Option(name, (inline,)))
            continue
        values: list[str] = []
        if name not in vocabulary.switches:
            limit = len(tokens) if name in vocabulary.multi_value else min(len(tokens), i + 1)
            while i < limit and not is_option(tokens[i]):
                values.append(tokens[i])
                i += 1
            if not values and name not in vocabulary.multi_value | vocabulary.optional_value:
                raise FlagError(f"{vocabulary.label}: argument {name}: expected one argument")
        options.append(Option(name, tuple(values)))
    for option in options:  # what the server's parser refuses is refused here, not "not modelled"
        if option.name not in vocabulary.modelled:
            vocabulary.check(option)
    return Scan(tuple(options), tuple(positionals))


def _launcher_at(tokens: Sequence[str], i: int, launchers: Sequence[Launcher]) -> int:
    """How many words a launcher starting at TOKENS[i] spans (0 when none starts there)."""
    base = PurePath(tokens[i]).name
    for program, *rest in launchers:
        named = (base.startswith("python") and re.fullmatch(_PYTHON, base)) if program == "python" else base == program
        if named and list(tokens[i + 1 : i + 1 + len(rest)]) == rest:
            return 1 + len(rest)
    return 0


def split_launcher(tokens: Sequence[str], launchers: Sequence[Launcher]) -> tuple[list[str], list[str], str | None]:
    """(words before the first of LAUNCHERS pasted in TOKENS, words after it, the launcher as written);
    the environment assignments just before it are dropped. No launcher: ([], TOKENS, None)."""
    for i in range(len(tokens)):
        span = _launcher_at(tokens, i, launchers)
        if span:
            before = list(tokens[:i])
            while before and re.fullmatch(_ENV_ASSIGNMENT, before[-1]):
                before.pop()
            return before, list(tokens[i + span :]), " ".join(tokens[i : i + span])
    return [], list(tokens), None
