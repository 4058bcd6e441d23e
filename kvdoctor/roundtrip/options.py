"""What a round trip is asked to do: how many requests, how long, which seed, which fault, how reduced."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kvdoctor._exceptions import InputError
from kvdoctor.choices import DEVICE_HELP
from kvdoctor.core.declared import group, option
from kvdoctor.core.sglang import rules

__all__ = [
    "MAX_SEED",
    "MAX_TOKENS",
    "BenchOptions",
    "ExtraPath",
    "Reductions",
    "RoundtripOptions",
    "check_options",
]

MAX_SEED = 2**64 - 1  # torch.Generator.manual_seed takes a 64-bit seed
MAX_TOKENS = 2**31 - 1  # far past any context length; the memory budget refuses far less


@dataclass(frozen=True)
class Reductions:
    """Explicit shrinkage of the model's state, so a test or a laptop can run it; None keeps it. ``bench roundtrip``
    takes its fields as options (``kvdoctor.core.declared``)."""

    layers: int | None = option(  # at most this many layers per sub-pool (full, swa, recurrent)
        None, "--layers", min=1, help="Reduce: at most N layers per sub-pool."
    )
    heads: int | None = option(  # at most this many KV heads, and recurrent-state heads
        None, "--heads", min=1, help="Reduce: at most N KV / recurrent heads."
    )

    def describe(self) -> str:
        parts = [f"layers<={self.layers}" if self.layers else "", f"heads<={self.heads}" if self.heads else ""]
        return ", ".join(p for p in parts if p) or "none (full model shapes)"


@dataclass(frozen=True)
class RoundtripOptions:
    device: str = "auto"
    requests: int = 8
    tokens: int = 256
    seed: int = 0
    inject: str | None = None
    reductions: Reductions = field(default_factory=Reductions)
    retract_fraction: float = 0.5
    chunk: int = rules.CPU_OFFLOAD_CHUNK


def check_options(opts: RoundtripOptions) -> None:
    """The options' own bounds (exit 2), before anything is allocated or drawn."""
    if opts.requests < 2:
        raise InputError("--requests must be at least 2 (some are retracted, some stay resident)")
    if not 2 <= opts.tokens <= MAX_TOKENS:
        raise InputError(f"--tokens must be in [2, {MAX_TOKENS:,}] (a retraction moves seqlen - 1 tokens)")
    if not 0 <= opts.seed <= MAX_SEED:
        raise InputError("--seed must be in [0, 2**64) (torch.Generator takes a 64-bit seed)")
    if not 0 < opts.retract_fraction < 1:
        raise InputError("the retracted fraction must be in (0, 1)")
    for flag, kept in (("--layers", opts.reductions.layers), ("--heads", opts.reductions.heads)):
        if kept is not None and kept < 1:  # 0 would read as "no reduction" and run the full shapes
            raise InputError(f"{flag} must be at least 1, got {kept}")


# What `bench roundtrip` is asked to time, beside what a round trip is asked to do: the engine adapters
# (kvdoctor/engines/) take and return these, so they sit on the contract's floor, below the engines. The command's
# options are declared here (its record, ``cli/bench_roundtrip.py``, holds this one as a group).
@dataclass(frozen=True)
class BenchOptions:
    device: str = option("auto", "--device", help=DEVICE_HELP)
    requests: int = option(64, "--requests", min=1, help="Requests offloaded and restored per round.")
    tokens: int = option(2048, "--tokens", min=2, help="Tokens per request.")
    repeats: int = option(5, "--repeats", min=1, help="Timed rounds per path (after one warm-up).")
    warmup: int = 1
    seed: int = 0
    reductions: Reductions = group(Reductions)


@dataclass(frozen=True)
class ExtraPath:
    """Another implementation of the same offload/restore, timed in the same interleaved rounds.

    ``kvdoctor bench roundtrip --engine sglang`` passes SGLang's own ``backup_kv_cache`` /
    ``restore_kv_cache`` on SGLang's own pools holding the same requests (``nbytes`` per round, from
    its copy ledger), so the ratios come from one run on one machine state.
    """

    name: str
    offload: Callable[[], object]
    restore: Callable[[object], None]
    nbytes: int
