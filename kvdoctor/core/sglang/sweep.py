"""SGLang's built-in sweep space: the server flags that change how a request's state is kept, and what to try.

Each row names a flag, the values ``kvdoctor sweep`` tries (``None``: every choice SGLang's own parser offers), the
state path it moves, and whether only a PD deployment reads it. The flag's default is SGLang's own, read from its
parser (``_generated/server_flags.py``: ``SGLANG_DEST_DEFAULTS``), never restated here; ``None`` there means the flag
is left out and SGLang decides at start-up. Numeric values are small, so a shrunk model on two CPU cores reaches the
path they move (a 64-token prefill chunk splits every prompt of the workload; four running requests force
retraction). Imports nothing heavy.
"""

from __future__ import annotations

from kvdoctor.core.sglang._generated.server_flags import (
    SGLANG_DEST_DEFAULTS,
    SGLANG_FLAG_DESTS,
    SGLANG_FLAG_VALUES,
    SGLANG_SWITCHES,
)

__all__ = ["ROWS", "default", "tried"]

Row = tuple[str, "tuple[object, ...] | None", str, "str | None"]  # (flag, values, why, topology)

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
