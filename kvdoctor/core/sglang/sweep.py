"""SGLang's built-in sweep space: the server flags that change how a request's state is kept, and what to try.

Each row names a flag, the values ``kvdoctor sweep`` tries (``None``: every choice SGLang's own parser offers), the
state path it moves, and whether only a PD deployment reads it. The flag's default is SGLang's own, read from its
parser (``_generated/server_flags.py``: ``SGLANG_DEST_DEFAULTS``), never restated here; ``None`` there means the flag
is left out and SGLang decides at start-up. Numeric values are small, so a shrunk model on two CPU cores reaches the
path they move (a 64-token prefill chunk splits every prompt of the workload; four running requests force
retraction). Imports nothing heavy.
"""

from __future__ import annotations

from kvdoctor.core.flag_values import ValueGrammar
from kvdoctor.core.sglang._generated.server_flags import (
    SGLANG_DEST_DEFAULTS,
    SGLANG_FLAG_DESTS,
    SGLANG_FLAG_VALUES,
    SGLANG_SERVER_FLAGS,
    SGLANG_SWITCHES,
)

__all__ = ["ROWS", "SHARED", "SHARED_OVER", "default", "grammar", "known", "launches", "rows", "tried"]

Row = tuple[str, "tuple[object, ...] | None", str, "str | None"]  # (flag, values, why, topology)
# Flags that change the numbers a correct server computes (not how a request's state is kept): the reference runs
# the same value, so the token oracle compares like with like.
SHARED = frozenset({"--mamba-ssm-dtype"})
# Flags every server of one topology must agree on: over PD a decode's page size is its prefill's (the transfer
# addresses the prefill's pages in the decode's), and the prefill is the reference's too, so every server runs it.
SHARED_OVER = {"--page-size": "pd"}

ROWS: tuple[Row, ...] = (
    (
        "--disable-overlap-schedule",
        (False, True),
        "the overlap schedule: the next batch is scheduled while the GPU runs this one (the overlap finding)",
        None,
    ),
    (
        "--chunked-prefill-size",
        (64, 512),
        "chunked prefill: a prompt prefilled in chunks, state carried on",
        None,
    ),
    ("--page-size", (16, 64), "the KV page: tokens allocated, backed up and sent in pages (left out: 1)", None),
    ("--disable-radix-cache", (False, True), "the radix cache: a prefix hit restores cached KV and state", None),
    ("--mamba-radix-cache-strategy", None, "how the radix cache checkpoints recurrent state", None),
    (
        "--disaggregation-decode-retraction-backup",
        ("cpu_tensor", "host_pool"),
        "where a retracted request's state is backed up on the decode",
        "pd",
    ),
    ("--disaggregation-decode-enable-radix-cache", (False, True), "a radix cache on the PD decode", "pd"),
    ("--schedule-policy", ("fcfs", "lpm"), "which waiting request runs next (lpm: longest prefix match)", None),
    ("--max-running-requests", (4, 16), "how many requests decode at once: fewer retract sooner", None),
    ("--enable-mixed-chunk", (False, True), "prefill chunks mixed into decode batches", None),
    ("--num-continuous-decode-steps", (1, 4), "decode steps run between two schedules", None),
    ("--mamba-ssm-dtype", ("float32", "bfloat16"), "the recurrent state's dtype (its backup and transfer)", None),
)


def default(flag: str) -> object:
    """SGLang's own default for FLAG (None: left out, decided at start-up)."""
    if flag in SGLANG_SWITCHES:
        return bool(SGLANG_DEST_DEFAULTS.get(SGLANG_FLAG_DESTS[flag], False))
    return SGLANG_DEST_DEFAULTS.get(SGLANG_FLAG_DESTS[flag])


def tried(flag: str, values: tuple[object, ...] | None) -> tuple[object, ...]:
    """The values a row tries: its own, or every choice SGLang's parser offers for FLAG."""
    if values is not None:
        return values
    choices = SGLANG_FLAG_VALUES[flag][2]
    if choices is None:
        raise ValueError(f"{flag} offers no choices: its row must list the values to try")
    return tuple(choices)


def known(flag: str) -> bool:
    """FLAG is one SGLang's own parser takes."""
    return flag in SGLANG_SERVER_FLAGS


def grammar(flag: str) -> ValueGrammar | None:
    """The values SGLang's parser accepts for FLAG (None: a switch, or a flag it does not know)."""
    return SGLANG_FLAG_VALUES.get(flag)


def rows() -> tuple[tuple[str, tuple[object, ...], object, str, str | None, bool | str], ...]:
    """The built-in space, one (flag, values tried, SGLang's default, why, topology, shared) per row; shared is
    True (every server, every topology), False, or the one topology whose servers must all run it."""
    return tuple(
        (flag, tried(flag, values), default(flag), why, topo, flag in SHARED or SHARED_OVER.get(flag, False))
        for flag, values, why, topo in ROWS
    )


def launches(
    topology: str, subject: tuple[str, ...], every: tuple[str, ...]
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The servers a configuration starts, as (role, SGLang flags), for the rule model to judge before any launch:
    over PD the prefill (the flags every server runs; it serves the reference too) and the subject's decode; on one
    server the subject. kvdoctor's own flags (pool sizes, ports) are left to the deployment."""
    if topology == "pd":
        return (
            ("prefill", ("--disaggregation-mode", "prefill", *every)),
            ("decode-pressured", ("--disaggregation-mode", "decode", *every, *subject)),
        )
    return (("pressured", (*every, *subject)),)
