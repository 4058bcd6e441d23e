"""pd-eval's command line: kvdoctor's own options before ``--``, the servers' flags after it.

Why: told to pass unknown options on (what once let SGLang flags through without ``--``), Click hands
the command every word it did not recognise *and* every word after ``--`` in one list. A misspelt
``--treshold 0.99`` was then appended to SGLang's launch line, or, against servers someone else runs
(``--*-url``), dropped: the gate ran at the default 0.80 and passed. So the command line is split on
the real argv, at the first ``--`` that is not an option's value (``split``): every word before it is
kvdoctor's, and one Click did not take (an unknown option, a unique prefix, a second positional) is
refused with a did-you-mean (``check_own_words``, exit 2); only the words after it may reach a server.
Those are checked as server flags the way pd-eval always checked them (the plan's own flags refused as SGLang
reads them, aliases and prefixes too, ``kvdoctor.deploy.plan.check_extra_args``; SGLang's argparse refuses what it
does not know), plus
``check_server_words``: an option only kvdoctor defines is refused there too, as ``inspect`` does.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Sequence

from kvdoctor._exceptions import FlagError, InputError
from kvdoctor.deploy.plan import PLAN_FLAGS, check_extra_args
from kvdoctor.text import shown

SEPARATOR = "--"
USAGE = "kvdoctor pd-eval MODEL [OPTIONS] -- [SERVER FLAGS]"


def is_option(word: str) -> bool:
    """An option-shaped word (``-1`` and ``-0.5`` are values, as argparse and Click read them)."""
    return word.startswith("-") and len(word) > 1 and not word[1:2].isdigit() and word[1:2] != "."


def split(words: Sequence[str], value_options: Collection[str]) -> tuple[list[str], list[str]]:
    """(kvdoctor's words, the server words) at the first ``--`` that is not the value of an option in
    ``value_options`` (``--launcher --`` gives ``--launcher`` the value ``--``, as Click would)."""
    i = 0
    while i < len(words):
        if words[i] == SEPARATOR:
            return list(words[:i]), list(words[i + 1 :])
        i += 2 if words[i] in value_options else 1
    return list(words), []


def check_own_words(model: str, leftovers: Sequence[str], own_options: Collection[str]) -> None:
    """Refuse what Click left over before ``--``: an unknown option or a word beside MODEL.

    With unknown options ignored, Click may hand an unknown option to MODEL (``--treshold 0.99 M``
    makes MODEL ``--treshold``), so MODEL is read with the leftovers, in order.
    """
    words = [model, *leftovers]
    option = next((w for w in words if is_option(w)), None)
    if option is not None:
        raise unknown_option(option, own_options)
    if len(words) > 1:
        raise InputError(
            f"unexpected argument {shown(words[1])!r} after MODEL {shown(words[0])!r}: pd-eval takes one MODEL, "
            f"and server flags go after '--' ({USAGE})"
        )


def unknown_option(word: str, own_options: Collection[str]) -> InputError:
    """The one-line refusal of an option before ``--`` that pd-eval does not define."""
    from kvdoctor.core.sglang._generated.server_flags import SGLANG_SERVER_FLAGS, SGLANG_VERSION

    name = word.partition("=")[0]
    if name in SGLANG_SERVER_FLAGS:
        return InputError(
            f"{shown(name)} is an SGLang server flag, not a kvdoctor pd-eval option: put it after '--' ({USAGE})"
        )
    head = f"unknown option {shown(name)}: not a kvdoctor pd-eval option"
    own = sorted(set(own_options))
    prefixed = [o for o in own if o.startswith(name)] if name.startswith("--") and len(name) > 2 else []
    if prefixed:
        listed = " or ".join(prefixed[:3])
        return InputError(f"{head} (abbreviations are not expanded); did you mean {listed}?")
    close = difflib.get_close_matches(name, own, n=1, cutoff=0.6)
    if close:
        return InputError(f"{head}; did you mean {close[0]}?")
    server = difflib.get_close_matches(name, sorted(SGLANG_SERVER_FLAGS), n=1, cutoff=0.75)
    if server:
        return InputError(
            f"{head}; did you mean {server[0]}, an SGLang {SGLANG_VERSION} server flag? Server flags go after '--'"
        )
    return InputError(f"{head} (see 'kvdoctor pd-eval -h'; server flags go after '--')")


def check_server_words(words: Sequence[str], own_options: Collection[str]) -> None:
    """After ``--``: an option only kvdoctor defines (``-- --threshold 0.99``) would go to SGLang, which
    does not have it (or, worse, reads it as the flag it abbreviates: ``--api`` as ``--api-key``); it is
    kvdoctor's, so it belongs before ``--``. Options SGLang spells exactly (``--host``) are SGLang's here,
    and those SGLang reads as a flag the plan sets (``--tp``, a prefix of ``--tp-size``) are refused by
    ``plan.check_extra_args`` here, before any mode's work, naming pd-eval's own option (``--oracle tokens``
    then never reaches consistency's check with them). Every other word is held to SGLang's flags and their
    values (``plan.server_flag_names``)."""
    from kvdoctor.core.sglang._generated.server_flags import SGLANG_SERVER_FLAGS

    plan_words = {o for o in own_options if _read_as_plan_flag(o)}
    for word in words:
        name = word.partition("=")[0]
        if is_option(word) and name in own_options and name not in SGLANG_SERVER_FLAGS and name not in plan_words:
            raise InputError(
                f"{shown(name)} after '--' is kvdoctor's own option: put it before '--' "
                f"(what follows '--' goes to the servers; {USAGE})"
            )
    # SGLang's flags and values, did-you-mean over both sides; the plan's own (``--tp``) are named by the plan
    check_extra_args(words, tuple(o for o in own_options if o not in plan_words))


def _read_as_plan_flag(option: str) -> bool:
    """Whether SGLang's parser reads OPTION (one of pd-eval's own) as a flag the plan sets (``--tp``, ``--host``)."""
    from kvdoctor.core.sglang.flags import owned_word

    try:
        return owned_word([option], PLAN_FLAGS) is not None
    except FlagError:  # not an SGLang flag, nor a unique prefix of one
        return False


READ_FROM_SERVER_WORDS = ("--served-model-name",)  # what the requests name as the model, even against running servers


def check_unreachable(words: Sequence[str]) -> None:
    """Against servers someone else runs (``--*-url``) nothing kvdoctor starts takes server flags: a
    word after ``--`` would be dropped silently (a misplaced ``-- --threshold 0.99`` with it). Only
    ``--served-model-name`` (the name the requests carry) is read; anything else is refused."""
    i = 0
    while i < len(words):
        word = words[i]
        if word in READ_FROM_SERVER_WORDS:
            i += 2
            continue
        if word.partition("=")[0] in READ_FROM_SERVER_WORDS and "=" in word:
            i += 1
            continue
        raise InputError(
            f"{shown(word)} after '--' cannot reach a server: with --prefill-url/--decode-url/--router-url kvdoctor "
            "starts none, and the running servers keep their own flags (only --served-model-name is read then)"
        )
