"""The server flags a kvdoctor command sets itself, found after ``--`` however the server's parser spells them.

Why: ``consistency MODEL -- --model PATH`` once swapped the model on every server while the report named the
seeded checkpoint: the owned-flag check matched names, and ``--model`` is SGLang's alias of ``--model-path``
(SGLang 0.5.23 ``srt/arg_groups/fields/model.py:51-57``). To a server's argparse, a word names a flag by its
exact spelling, by an alias (another option string of the same dest), by a unique prefix (``allow_abbrev``, on
in both parsers kvdoctor launches: SGLang's ``prepare_server_args``, ``srt/server_args.py:679``; vLLM's
``FlexibleArgumentParser`` in ``entrypoints/launchers/api_server/entry.py:218``) or, for vLLM, with underscores
for dashes; every one of them stores into the same dest, and the last one wins. So a command's owned flags are
held by dest, the dest read from the server's own parser (the generated ``*_FLAG_DESTS`` tables), and a word
is resolved as that parser resolves it (:meth:`FlagVocabulary.resolve`).

Pure: the caller passes the server's vocabulary and dest table, and words its scan already accepted.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from kvdoctor.core.launch_line import FlagVocabulary, is_option
from kvdoctor.core.record import record


@record(frozen=True)
class Owned:
    """A word after ``--`` that sets an owned flag: as typed, as the server's parser reads it, and the flag."""

    typed: str  # the word as given, before any '=' ("--model", "--served_model")
    spelled: str  # as the parser looks it up (vLLM: underscores as dashes)
    option: str  # the option string it matches (a unique prefix expanded)
    flag: str  # the owned flag whose dest it stores into (the owning table's spelling)

    def reading(self, server: str) -> str:
        """`` (SGLang reads it as --model-path, its alias)``; "" when the word is the owned flag itself."""
        if self.typed == self.flag:
            return ""
        how = []
        if self.spelled != self.typed:
            how.append("underscores as dashes")
        relation = "its inverse" if _negates(self.option) != _negates(self.flag) else "its alias"
        if self.option != self.spelled:
            how.append("a unique prefix" + (f" of {relation} {self.option}" if self.option != self.flag else ""))
        elif self.option != self.flag:
            how.append(relation)
        return f" ({server} reads it as {self.flag}, {' and '.join(how)})"


def _negates(option: str) -> bool:
    """``--no-x`` and ``--disable-x`` store the opposite of ``--x`` / ``--enable-x`` into the same dest."""
    return option.startswith(("--no-", "--disable-"))


def spellings(flag: str, dests: Mapping[str, str]) -> frozenset[str]:
    """Every option string that stores into FLAG's dest (FLAG itself, its aliases, ``--no-`` spellings)."""
    dest = dests[flag]  # a KeyError: an owning table names a flag the server does not have (a kvdoctor bug)
    return frozenset(option for option, d in dests.items() if d == dest)


def find_owned(
    words: Sequence[str], vocabulary: FlagVocabulary, dests: Mapping[str, str], owned: Collection[str]
) -> Owned | None:
    """The first of WORDS (server words the vocabulary's scan accepted) that sets the dest of a flag in OWNED."""
    for word in words:
        if not is_option(word):
            continue
        typed = word.partition("=")[0]
        option = vocabulary.resolve(typed)
        flags = [flag for flag in owned if dests[flag] == dests.get(option)]
        if flags:  # the option itself if owned, else an owned flag of its sign (--disable-x: --no-enable-x)
            flag = option if option in flags else next((f for f in flags if _negates(f) == _negates(option)), flags[0])
            return Owned(typed, vocabulary.spelling(typed), option, flag)
    return None
