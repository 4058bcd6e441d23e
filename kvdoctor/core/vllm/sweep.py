"""vLLM's built-in sweep space: the server flags that change how a request's state is kept, and what to try.

Each row names a flag, the values ``kvdoctor sweep --server vllm`` tries (``None``: every choice vLLM's own parser
offers), the state path it moves, and whether only a PD deployment reads it (none: kvdoctor runs vLLM single). The
default is vLLM's own, read from its parser (``_generated/server_flags.py``: ``VLLM_DEST_DEFAULTS``); most are
``None``, decided at start-up from the model and the platform, so a switch is tried on (``--X``), off (``--no-X``)
and left out. ``--max-num-seqs`` is kvdoctor's own (the workload's concurrency) and is listed refused, with the
reason, never dropped. Imports nothing heavy.
"""

from __future__ import annotations

from kvdoctor.core.flag_values import ValueGrammar
from kvdoctor.core.vllm._generated.server_flags import (
    VLLM_DEST_DEFAULTS,
    VLLM_FLAG_DESTS,
    VLLM_FLAG_VALUES,
    VLLM_SERVER_FLAGS,
)

__all__ = ["ROWS", "SHARED", "default", "grammar", "known", "launches", "rows", "tried"]

ROWS: tuple[tuple[str, tuple[object, ...] | None, str, str | None], ...] = (
    (
        "--async-scheduling",
        (False, True),
        "async scheduling: the next step is scheduled before this one's tokens are back (async x hybrid state)",
        None,
    ),
    ("--max-num-batched-tokens", (64, 2048), "chunked prefill: a prompt prefilled in steps of this many tokens", None),
    ("--block-size", (16, 32), "the KV block a request's tokens are allocated, freed and cached in", None),
    ("--enable-prefix-caching", (False, True), "prefix caching: a hit restores cached blocks (and Mamba state)", None),
    ("--mamba-cache-mode", None, "how prefix caching keeps a Mamba layer's state", None),
    ("--max-num-seqs", (4, 16), "how many requests run at once: fewer preempt sooner", None),
    ("--mamba-ssm-cache-dtype", ("float32", "bfloat16"), "the recurrent state's dtype", None),
)
# Flags that change the numbers a correct server computes: the reference runs the same value.
SHARED = frozenset({"--mamba-ssm-cache-dtype"})


def known(flag: str) -> bool:
    """FLAG is one vLLM's own parser takes."""
    return flag in VLLM_SERVER_FLAGS


def grammar(flag: str) -> ValueGrammar | None:
    """The values vLLM's parser accepts for FLAG (None: a switch, or a flag it does not know)."""
    return VLLM_FLAG_VALUES.get(flag)


def default(flag: str) -> object:
    """vLLM's own default for FLAG (None: left out, decided at start-up)."""
    return VLLM_DEST_DEFAULTS.get(VLLM_FLAG_DESTS[flag])


def tried(flag: str, values: tuple[object, ...] | None) -> tuple[object, ...]:
    """The values a row tries: its own, or every choice vLLM's parser offers for FLAG."""
    if values is not None:
        return values
    choices = VLLM_FLAG_VALUES[flag][2]
    if choices is None:
        raise ValueError(f"{flag} offers no choices: its row must list the values to try")
    return tuple(choices)


def rows() -> tuple[tuple[str, tuple[object, ...], object, str, str | None, bool], ...]:
    """The built-in space, one (flag, values tried, vLLM's default, why, topology, shared) per row."""
    return tuple(
        (flag, tried(flag, values), default(flag), why, topo, flag in SHARED) for flag, values, why, topo in ROWS
    )


def launches(
    topology: str, subject: tuple[str, ...], every: tuple[str, ...]
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The server a configuration starts, as (role, vLLM flags), for the rule model to judge before its launch
    (kvdoctor runs vLLM on one server: TOPOLOGY is single)."""
    return (("pressured", (*every, *subject)),)
