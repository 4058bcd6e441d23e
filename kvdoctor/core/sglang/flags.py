"""SGLang server flags, in SGLang's own spellings, parsed into one frozen ``ServerFlags``.

A user pastes their launch line; kvdoctor models the flags that change where state lives or how
retraction backs it up, and lists every other SGLang flag as "not modelled" rather than dropping it.
An option that is neither kvdoctor's own nor one of SGLang's (``sglang_server_flags``, generated from
the wheel) is refused with a did-you-mean: a typo such as ``--strcit`` must not pass as a server flag
and silently switch a gate off. Unique prefixes are expanded as SGLang's argparse does (``--tp``).
A whole launch line may be pasted: ``python -m sglang.launch_server ...`` or ``sglang serve ...``,
with ``--model-path`` / ``--model`` (or serve's positional) naming MODEL.
Spellings and defaults follow ``sglang/srt/server_args.py`` of the revision in ``rules/``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Collection, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING

from kvdoctor._exceptions import FlagError
from kvdoctor.core.flag_values import IEC, SI, sglang_human
from kvdoctor.core.launch_line import FlagVocabulary, LaunchLine, Scan, check_values, is_option, scan, split_launcher
from kvdoctor.core.owned_flags import Owned, find_owned
from kvdoctor.core.record import record
from kvdoctor.core.sglang import rules
from kvdoctor.text import shown

if TYPE_CHECKING:
    import argparse


def _choices(flag: str) -> tuple[str, ...]:
    """FLAG's choices as SGLang's own parser lists them (the generated value table: one source, no copy)."""
    from kvdoctor.core.sglang._generated.server_flags import SGLANG_FLAG_VALUES, SGLANG_VERSION

    choices = SGLANG_FLAG_VALUES[flag][2]
    if choices is None:  # the generated table changed under the parser: a kvdoctor bug, caught on first use
        raise RuntimeError(f"{flag} has no choices in the SGLang {SGLANG_VERSION} value table")
    return tuple(str(c) for c in choices)


# arg_groups/fields/model.py:197-221, disagg.py:95-108, exec_.py:483-519, memory.py (read from the parser).
# Read from the generated table on first use (module __getattr__ below): a plain inspect loads no flag table.
_CHOICES = {
    "KV_CACHE_DTYPES": "--kv-cache-dtype",
    "DISAGGREGATION_MODES": "--disaggregation-mode",
    "RETRACTION_BACKUPS": "--disaggregation-decode-retraction-backup",
    "STATE_DTYPES": "--mamba-ssm-dtype",
    "MAMBA_RADIX_STRATEGIES": "--mamba-radix-cache-strategy",
    "HICACHE_STORAGE_BACKENDS": "--hicache-storage-backend",
    "HICACHE_HOST_MEMORY_MODES": "--hicache-host-memory-mode",
}


@record(frozen=True)
class ServerFlags:
    """The modelled server flags, named as SGLang's ``ServerArgs`` fields."""

    kv_cache_dtype: str = "auto"
    disaggregation_mode: str = "null"
    disaggregation_decode_retraction_backup: str | None = None
    enable_hierarchical_cache: bool = False
    hicache_ratio: float | None = None
    hicache_size: int = 0
    hicache_storage_backend: str | None = None
    hicache_host_memory_mode: str = "cache"
    disaggregation_decode_enable_radix_cache: bool = False
    disaggregation_decode_enable_offload_kvcache: bool = False
    disaggregation_decode_host_receive_threshold: float = 1.0
    enable_priority_scheduling: bool = False
    disable_priority_preemption: bool = False
    max_total_tokens: int | None = None
    context_length: int | None = None
    # None means "unset": SGLang then applies a model override or its fallback (0.8 / 0.9).
    swa_full_tokens_ratio: float | None = None
    mamba_full_memory_ratio: float | None = None
    max_mamba_cache_size: int | None = None
    mamba_ssm_dtype: str | None = None
    mamba_radix_cache_strategy: str = "auto"
    page_size: int = 1
    tp_size: int = 1
    dcp_size: int = 1
    dp_size: int = 1
    attn_dp_size: int = 1
    enable_dp_attention: bool = False
    enable_unified_memory: bool = False
    disable_hybrid_swa_memory: bool = False
    enable_scattered_sconv: bool = False
    attention_backend: str | None = None
    decode_attention_backend: str | None = None
    prefill_attention_backend: str | None = None
    disable_radix_cache: bool = False
    disable_overlap_schedule: bool = False
    dtype: str = "auto"
    not_modelled: tuple[str, ...] = ()

    @property
    def dcp_enabled(self) -> bool:
        return self.dcp_size > 1

    @property
    def attention_dp_size(self) -> int:
        """Attention data-parallel groups: --attn-dp-size, or the deprecated --dp-size N with
        --enable-dp-attention (arg_groups/parallel_hook.py, ``rules.ATTN_DP_SOURCE``)."""
        if self.attn_dp_size > 1:
            return self.attn_dp_size
        return self.dp_size if self.enable_dp_attention else 1

    @property
    def attention_tp_size(self) -> int:
        """The tensor-parallel width of attention (what KV heads and recurrent state are split over)."""
        return max(1, self.tp_size // self.attention_dp_size)

    @property
    def retraction_backup_declared(self) -> str | None:
        """The backend the launch line fixes before SGLang infers one: the flag, or host_pool declared by
        a host-receive threshold below 1 (which wins over an explicit none; ``rules.HOST_RECEIVE_SOURCE``)."""
        explicit = self.disaggregation_decode_retraction_backup
        if self.disaggregation_decode_host_receive_threshold < 1 and explicit != "cpu_tensor":
            return rules.HOST_RECEIVE_BACKEND  # an explicit cpu_tensor is refused instead
        return explicit

    @property
    def is_decode(self) -> bool:
        return self.disaggregation_mode == "decode"

    def uses_backend(self, name: str) -> bool:
        backends = (self.attention_backend, self.decode_attention_backend, self.prefill_attention_backend)
        return name in backends

    @property
    def uses_fa4(self) -> bool:
        return self.uses_backend("fa4")


def _type_error(message: str) -> Exception:
    """argparse's "invalid value" error (converters run only inside the parser, which has imported argparse)."""
    import argparse

    return argparse.ArgumentTypeError(message)


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise _type_error(f"must be a positive integer, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise _type_error(f"must not be negative, got {text}")
    return value


def _human_int(text: str) -> int:
    """SGLang's human_readable_int (utils/common.py:3394; its grammar in ``flag_values``): 64k, 1.5M, 64Ki;
    then, as kvdoctor reads a token count, a positive whole number."""
    match = sglang_human().fullmatch(text.strip())
    if match is None:
        return _positive_int(text)
    number, suffix = match.groups()
    if suffix in IEC:
        if "." in number:
            raise _type_error(f"decimals are not allowed with IEC suffixes, got {text}")
        return int(number) * IEC[suffix]
    value = float(number) * SI[suffix]
    if value != int(value) or value <= 0:
        raise _type_error(f"must be a positive whole number of tokens, got {text}")
    return int(value)


def _ratio(text: str) -> float:
    value = float(text)
    if not 0.0 < value <= 1.0:
        raise _type_error(f"must be in (0, 1], got {text}")
    return value


def _unit_interval(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise _type_error(f"must be in [0, 1], got {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not (value > 0.0 and math.isfinite(value)):
        raise _type_error(f"must be a finite number > 0, got {text}")
    return value


# argparse names a value it cannot convert by its type function's __name__ ("invalid _positive_int
# value: 'abc'"): the names a person reads instead.
for _type, _name in (
    (_positive_int, "positive integer"),
    (_non_negative_int, "non-negative integer"),
    (_human_int, "token count"),
    (_ratio, "ratio"),
    (_unit_interval, "number in [0, 1]"),
    (_positive_float, "positive number"),
):
    _type.__name__ = _name


@functools.cache
def _parser() -> argparse.ArgumentParser:
    """kvdoctor's parser of the modelled flags, built once per process (argparse keeps no state between parses).

    Built on the first launch line that sets a modelled flag (``parse_flags``), not at import: argparse and the
    parser cost a plain ``inspect`` ~5 ms of start-up."""
    import argparse

    class _Parser(argparse.ArgumentParser):
        """argparse that raises ``FlagError`` instead of printing usage and exiting."""

        def error(self, message: str) -> None:  # type: ignore[override]
            raise FlagError(f"server flags: {message}")

    p = _Parser(prog="sglang", add_help=False, allow_abbrev=False)
    p.add_argument("--kv-cache-dtype", choices=_choices("--kv-cache-dtype"), default="auto")
    p.add_argument("--disaggregation-mode", choices=_choices("--disaggregation-mode"), default="null")
    p.add_argument(
        "--disaggregation-decode-retraction-backup", choices=_choices("--disaggregation-decode-retraction-backup")
    )
    p.add_argument(
        "--enable-hierarchical-cache", "--enable-hicache", action="store_true", dest="enable_hierarchical_cache"
    )
    p.add_argument("--hicache-ratio", type=_positive_float)
    p.add_argument("--hicache-size", type=_non_negative_int, default=0)
    p.add_argument("--hicache-storage-backend", choices=_choices("--hicache-storage-backend"))
    p.add_argument("--hicache-host-memory-mode", choices=_choices("--hicache-host-memory-mode"), default="cache")
    p.add_argument("--disaggregation-decode-enable-radix-cache", action="store_true")
    p.add_argument("--disaggregation-decode-enable-offload-kvcache", action="store_true")
    p.add_argument("--disaggregation-decode-host-receive-threshold", type=_unit_interval, default=1.0)
    p.add_argument("--enable-priority-scheduling", action="store_true")
    p.add_argument("--disable-priority-preemption", action="store_true")
    p.add_argument("--max-total-tokens", type=_human_int)
    p.add_argument("--context-length", type=_human_int)  # SGLang reads it with human_readable_int
    p.add_argument("--swa-full-tokens-ratio", type=_ratio)
    p.add_argument("--mamba-full-memory-ratio", type=_positive_float)  # a mamba:KV ratio, no upper bound
    p.add_argument("--max-mamba-cache-size", type=_positive_int)
    p.add_argument("--mamba-ssm-dtype", choices=_choices("--mamba-ssm-dtype"))
    p.add_argument("--mamba-radix-cache-strategy", choices=_choices("--mamba-radix-cache-strategy"), default="auto")
    p.add_argument("--page-size", type=_positive_int, default=1)
    p.add_argument("--disable-radix-cache", action="store_true")
    p.add_argument("--disable-overlap-schedule", action="store_true")
    p.add_argument("--dtype", default="auto")
    # SGLang's parser accepts unique prefixes, so its own fixtures pass --tp for --tp-size.
    p.add_argument("--tp-size", "--tp", "--tensor-parallel-size", dest="tp_size", type=_positive_int, action="append")
    p.add_argument("--dcp-size", "--decode-context-parallel-size", dest="dcp_size", type=_positive_int, default=1)
    p.add_argument("--dp-size", "--data-parallel-size", dest="dp_size", type=_positive_int, default=1)
    p.add_argument(
        "--attn-dp-size", "--attention-data-parallel-size", dest="attn_dp_size", type=_positive_int, default=1
    )
    p.add_argument("--enable-dp-attention", action="store_true")
    p.add_argument("--enable-unified-memory", action="store_true")
    p.add_argument("--disable-hybrid-swa-memory", action="store_true")
    p.add_argument("--enable-scattered-sconv", action="store_true")
    p.add_argument("--attention-backend")
    p.add_argument("--decode-attention-backend")
    p.add_argument("--prefill-attention-backend")
    return p


# --- Reading a pasted command line: SGLang's vocabulary for the shared scanner (``core/launch_line.py``) ---

MODEL_FLAGS = ("--model-path", "--model")  # SGLang's spellings of MODEL (arg_groups/fields/model.py)
LAUNCHERS = (("python", "-m", "sglang.launch_server"), ("sglang", "serve"))


def _modelled_options(parser: argparse.ArgumentParser) -> frozenset[str]:
    return frozenset(s for action in parser._actions for s in action.option_strings)


# Every spelling ``_parser`` reads, listed so that the vocabulary needs no parser at import
# (tests/cli/test_startup_imports.py holds it equal to ``_modelled_options(_parser())``).
_MODELLED = frozenset(
    (
        "--kv-cache-dtype",
        "--disaggregation-mode",
        "--disaggregation-decode-retraction-backup",
        "--enable-hierarchical-cache",
        "--enable-hicache",
        "--hicache-ratio",
        "--hicache-size",
        "--hicache-storage-backend",
        "--hicache-host-memory-mode",
        "--disaggregation-decode-enable-radix-cache",
        "--disaggregation-decode-enable-offload-kvcache",
        "--disaggregation-decode-host-receive-threshold",
        "--enable-priority-scheduling",
        "--disable-priority-preemption",
        "--max-total-tokens",
        "--context-length",
        "--swa-full-tokens-ratio",
        "--mamba-full-memory-ratio",
        "--max-mamba-cache-size",
        "--mamba-ssm-dtype",
        "--mamba-radix-cache-strategy",
        "--page-size",
        "--disable-radix-cache",
        "--disable-overlap-schedule",
        "--dtype",
        "--tp-size",
        "--tp",
        "--tensor-parallel-size",
        "--dcp-size",
        "--decode-context-parallel-size",
        "--dp-size",
        "--data-parallel-size",
        "--attn-dp-size",
        "--attention-data-parallel-size",
        "--enable-dp-attention",
        "--enable-unified-memory",
        "--disable-hybrid-swa-memory",
        "--enable-scattered-sconv",
        "--attention-backend",
        "--decode-attention-backend",
        "--prefill-attention-backend",
    )
)


@functools.cache
def _vocabulary() -> FlagVocabulary:
    """``SGLANG``: made from the generated flag table (~3 M instructions to load) on the first launch line
    with an option, or the first ``flags.SGLANG`` read."""
    from kvdoctor.core.sglang._generated.server_flags import (
        SGLANG_FLAG_VALUES,
        SGLANG_MULTI_VALUE,
        SGLANG_OPTIONAL_VALUE,
        SGLANG_SERVER_FLAGS,
        SGLANG_SWITCHES,
        SGLANG_VERSION,
    )

    # SGLang's parser accepts unique prefixes (argparse's allow_abbrev): its own fixtures pass --tp for --tp-size.
    return FlagVocabulary(
        label="server flags",
        server="SGLang",
        flag_kind=f"an SGLang {SGLANG_VERSION} server flag",
        known=frozenset(SGLANG_SERVER_FLAGS),
        switches=frozenset(SGLANG_SWITCHES),
        multi_value=frozenset(SGLANG_MULTI_VALUE),
        optional_value=frozenset(SGLANG_OPTIONAL_VALUE),
        values=SGLANG_FLAG_VALUES,
        modelled=_MODELLED,
        abbreviations=True,
    )


def owned_word(words: Sequence[str], owned: Collection[str]) -> Owned | None:
    """The first of WORDS (SGLang flags ``scan`` accepted) that SGLang's parser reads as a flag in OWNED: itself,
    an alias (one dest: ``--model`` for ``--model-path``) or a unique prefix (``kvdoctor.core.owned_flags``)."""
    from kvdoctor.core.sglang._generated.server_flags import SGLANG_FLAG_DESTS

    return find_owned(words, _vocabulary(), SGLANG_FLAG_DESTS, owned)


def __getattr__(name: str) -> object:
    """``SGLANG`` (the vocabulary) and the choice lists, made on first read."""
    if name == "SGLANG":
        return _vocabulary()
    if name in _CHOICES:
        choices = globals()[name] = _choices(_CHOICES[name])
        return choices
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _scan(tokens: Sequence[str], own_options: Collection[str]) -> Scan:
    """``scan`` with SGLang's vocabulary; words without an option need none (all of them are positionals)."""
    if not any(is_option(token) for token in tokens):
        return Scan((), tuple(tokens))
    return scan(tokens, _vocabulary(), own_options)


def parse_launch_line(
    tokens: Sequence[str], *, own_options: Collection[str] = (), default_model: str | None = None
) -> LaunchLine:
    """MODEL and the server flags from what followed the command (MODEL first, or a pasted launch line).

    MODEL comes from the one positional word, ``--model-path`` / ``--model``, or ``sglang serve``'s
    positional; every option must be kvdoctor's own or SGLang's (abbreviations expanded).
    """
    before, after, launcher = split_launcher(tokens, LAUNCHERS)
    head, tail = _scan(before, own_options), _scan(after, own_options)
    positionals = [*head.positionals, *tail.positionals]
    options = [o for o in (*head.options, *tail.options) if o.name not in MODEL_FLAGS]
    named = [o.values[-1] for o in (*head.options, *tail.options) if o.name in MODEL_FLAGS and o.values]
    if len(positionals) > 1:
        raise FlagError(
            f"unexpected argument {shown(positionals[1])!r} after MODEL {shown(positionals[0])!r} "
            "(server flags start with --)"
        )
    model = named[-1] if named else positionals[0] if positionals else default_model
    if named and positionals and positionals[0] != named[-1]:
        raise FlagError(f"MODEL {shown(positionals[0])!r} and --model-path {shown(named[-1])!r} name different models")
    if model is None:
        raise FlagError(
            "missing MODEL: give a config.json path, model directory, bundled fixture or cached Hub id "
            "(or --model-path, as in an SGLang launch line)"
        )
    argv = tuple(word for o in options for word in o.argv)
    return LaunchLine(model, argv, launcher)


def parse_flags(argv: Sequence[str], *, own_options: Collection[str] = ()) -> ServerFlags:
    """Parse SGLang server flags (no MODEL) into ``ServerFlags``; unmodelled SGLang flags are kept."""
    found = _scan(argv, own_options)
    if found.positionals:
        raise FlagError(
            f"unexpected argument {shown(found.positionals[0])!r} among the server flags (server flags start with --)"
        )
    modelled = _MODELLED
    not_modelled = tuple(" ".join(o.argv) for o in found.options if o.name not in modelled)
    if not any(o.name in modelled for o in found.options):
        # The parser's defaults are ServerFlags' own (tests/cli/test_startup_imports.py holds them equal):
        # a launch line without a modelled flag does not build the parser.
        return ServerFlags(not_modelled=not_modelled)
    try:
        known = _parser().parse_args([w for o in found.options if o.name in modelled for w in o.argv])
    except ValueError as exc:  # a type converter that raised plain ValueError
        raise FlagError(f"server flags: {exc}") from None
    check_values([o for o in found.options if o.name in modelled], _vocabulary())  # SGLang's grammar, beyond kvdoctor's
    tp_values = set(known.tp_size or [1])
    if len(tp_values) > 1:
        raise FlagError(f"server flags: --tp/--tp-size given twice with different values {sorted(tp_values)}")
    values = vars(known)
    values["tp_size"] = tp_values.pop()
    names = {f.name for f in fields(ServerFlags)}
    # Combinations SGLang refuses at start-up are not malformed input: they are hazard KVD014
    # (``core/sglang/refusals.py``, launch_refusals), reported with the rest of the analysis.
    return ServerFlags(**{k: v for k, v in values.items() if k in names}, not_modelled=not_modelled)
