"""A ``vllm serve`` line, in vLLM's own spellings, parsed into one frozen ``VllmFlags``.

The user pastes their launch line (``vllm serve MODEL --kv-transfer-config '{...}' ...`` or just the
flags after MODEL). kvdoctor models the flags that change which state exists, how it is grouped and
which connector moves it; every other vLLM flag is listed as not modelled, never dropped. An option
that is neither kvdoctor's own nor one of vLLM 0.33's (``server_flags``, generated from the wheel) is
refused with a did-you-mean. vLLM's ``FlexibleArgumentParser`` accepts ``--max_model_len`` for
``--max-model-len`` (``utils/argparse_utils.py:372-390``) and ``--flag=value``; both are read here.
Spellings and defaults: ``engine/arg_utils.py`` (``EngineArgs``), ``config/cache.py``,
``config/kv_transfer.py`` (``KVTransferConfig``, extra fields forbidden).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Collection, Sequence
from dataclasses import field
from typing import Any

from kvdoctor._exceptions import FlagError
from kvdoctor.core.flag_values import CONVERTERS
from kvdoctor.core.launch_line import (
    FlagVocabulary,
    LaunchLine,
    Option,
    Scan,
    check_values,
    is_option,
    scan,
    split_launcher,
)
from kvdoctor.core.owned_flags import Owned, find_owned
from kvdoctor.core.record import record
from kvdoctor.core.vllm import rules
from kvdoctor.text import shown

MODEL_FLAGS = ("--model",)
LAUNCHERS = (("vllm", "serve"), ("python", "-m", "vllm.entrypoints.openai.api_server"))
# KVTransferConfig's fields (config/kv_transfer.py, class KVTransferConfig); the dataclass forbids any other key.
KV_TRANSFER_KEYS = frozenset(
    {
        "kv_connector",
        "engine_id",
        "kv_buffer_device",
        "kv_role",
        "kv_port",
        "kv_connector_extra_config",
        "kv_connector_module_path",
        "enable_permute_local_kv",
        "kv_load_failure_policy",
    }
)
KV_ROLES = ("kv_producer", "kv_consumer", "kv_both")
OFFLOADING_BACKENDS = ("native", "lmcache")  # KVOffloadingBackend, config/cache.py:178


@record(frozen=True)
class KvTransfer:
    """The connector a launch line selects: from ``--kv-transfer-config`` or the offloading flags."""

    connector: str
    role: str | None
    source: str  # "--kv-transfer-config" or "--kv-offloading-size/--kv-offloading-backend"
    module_path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


@record(frozen=True)
class VllmFlags:
    """The modelled ``vllm serve`` flags, named as vLLM's ``EngineArgs`` fields."""

    kv_cache_dtype: str = "auto"
    dtype: str = "auto"
    block_size: int | None = None
    tensor_parallel_size: int = 1
    enable_prefix_caching: bool | None = None  # None: vLLM's default (on for generative models)
    disable_hybrid_kv_cache_manager: bool | None = None  # None: vLLM decides (off unless a connector lacks HMA)
    mamba_cache_dtype: str = "auto"
    mamba_ssm_cache_dtype: str = "auto"
    mamba_cache_mode: str | None = None
    kv_offloading_size: float | None = None
    kv_offloading_backend: str = "native"
    max_model_len: int | None = None  # None: not given; -1: auto (both: the derived length, model_len.py)
    max_model_len_text: str | None = field(default=None, compare=False)  # as written (--engine vllm re-reads it)
    kv_transfer_config: dict[str, Any] | None = field(default=None, compare=False)
    not_modelled: tuple[str, ...] = ()

    @property
    def transfer(self) -> KvTransfer | None:
        """The connector vLLM will build (``config/vllm.py:1151-1184`` folds the offloading flags in)."""
        if self.kv_offloading_size is not None:
            name = "OffloadingConnector" if self.kv_offloading_backend == "native" else "LMCacheMPConnector"
            extra = dict((self.kv_transfer_config or {}).get("kv_connector_extra_config") or {})
            return KvTransfer(name, "kv_both", "--kv-offloading-size/--kv-offloading-backend", None, extra)
        if self.kv_transfer_config is None or not self.kv_transfer_config.get("kv_connector"):
            return None
        cfg = self.kv_transfer_config
        return KvTransfer(
            str(cfg["kv_connector"]),
            cfg.get("kv_role"),
            "--kv-transfer-config",
            cfg.get("kv_connector_module_path"),
            dict(cfg.get("kv_connector_extra_config") or {}),
        )

    @property
    def prefix_caching(self) -> bool:
        return self.enable_prefix_caching is not False


# The boolean flags kvdoctor models, by their field's flag: vLLM's EnableDisableAction pairs --enable-x with
# --disable-x (and --disable-x with --enable-x), and still accepts BooleanOptionalAction's --no- spellings
# of both (utils/argparse_utils.py:120-145, EnableDisableAction).
BOOLEANS = {
    "--enable-prefix-caching": "enable_prefix_caching",
    "--disable-hybrid-kv-cache-manager": "disable_hybrid_kv_cache_manager",
}
_INVERSE = {"--enable-": "--disable-", "--disable-": "--enable-"}


def _spellings(flag: str) -> dict[str, bool]:
    """Every spelling of FLAG's field and the value each one sets."""
    prefix = next(p for p in _INVERSE if flag.startswith(p))
    inverse = _INVERSE[prefix] + flag.removeprefix(prefix)
    return {flag: True, "--no-" + flag[2:]: False, inverse: False, "--no-" + inverse[2:]: True}


# The valued flags parse_vllm_flags reads itself (with its own messages); the scanner checks every other one.
# MODELLED is these and BOOLEAN_SPELLINGS.
_MODELLED_VALUED = frozenset(
    {
        "--kv-cache-dtype",
        "--dtype",
        "--block-size",
        "--tensor-parallel-size",
        "-tp",
        "--mamba-cache-dtype",
        "--mamba-ssm-cache-dtype",
        "--mamba-cache-mode",
        "--kv-offloading-size",
        "--kv-offloading-backend",
        "--kv-transfer-config",
        "--max-model-len",
    }
)


# ``BOOLEAN_SPELLINGS``, ``MODELLED`` and ``VLLM`` read the generated flag table (``_generated/server_flags.py``,
# 1,900 lines), so they are made on first read (module ``__getattr__`` below), as SGLang's ``SGLANG`` is: a launch
# line without an option (``inspect MODEL --server vllm``) loads no flag table.
@functools.cache
def _boolean_spellings() -> dict[str, tuple[str, bool]]:
    """``BOOLEAN_SPELLINGS``: each spelling of a modelled boolean that vLLM's parser registers, and what it sets."""
    from kvdoctor.core.vllm._generated.server_flags import VLLM_SERVER_FLAGS

    return {
        spelling: (field, value)
        for flag, field in BOOLEANS.items()
        for spelling, value in _spellings(flag).items()
        if spelling in VLLM_SERVER_FLAGS  # the spellings vLLM's parser registers
    }


@functools.cache
def _modelled() -> frozenset[str]:
    """``MODELLED``: every flag parse_vllm_flags reads itself."""
    return _MODELLED_VALUED | frozenset(_boolean_spellings())


@functools.cache
def _vocabulary() -> FlagVocabulary:
    """``VLLM``: vLLM's flag vocabulary for the shared scanner (``core/launch_line.py``), from the generated table.

    Its parser reads options as SGLang's does, reads ``--max_model_len`` as ``--max-model-len``
    (utils/argparse_utils.py:372-390), then takes a unique prefix as argparse does: ``FlexibleArgumentParser``
    leaves ``allow_abbrev`` on, in the api_server entry kvdoctor launches (vLLM 0.33
    entrypoints/launchers/api_server/entry.py:218) as in ``vllm serve`` (tests/engines/vllm/test_vllm_owned_flags.py
    holds this to the installed parser)."""
    from kvdoctor.core.vllm._generated.server_flags import (
        VLLM_FLAG_VALUES,
        VLLM_MULTI_VALUE,
        VLLM_OPTIONAL_VALUE,
        VLLM_SERVER_FLAGS,
        VLLM_SWITCHES,
        VLLM_VERSION,
    )

    return FlagVocabulary(
        label="vLLM flags",
        server="vLLM",
        flag_kind=f"a vLLM {VLLM_VERSION} server flag",
        known=frozenset(VLLM_SERVER_FLAGS),
        switches=frozenset(VLLM_SWITCHES),
        multi_value=frozenset(VLLM_MULTI_VALUE),
        optional_value=frozenset(VLLM_OPTIONAL_VALUE),
        values=VLLM_FLAG_VALUES,
        modelled=_modelled(),
        abbreviations=True,
        underscores=True,
    )


_LAZY = {"VLLM": _vocabulary, "BOOLEAN_SPELLINGS": _boolean_spellings, "MODELLED": _modelled}


def __getattr__(name: str) -> object:
    """``VLLM``, ``BOOLEAN_SPELLINGS`` and ``MODELLED``, made from the generated flag table on first read."""
    if name in _LAZY:
        return _LAZY[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _scan(tokens: Sequence[str], own_options: Collection[str]) -> Scan:
    """``scan`` with vLLM's vocabulary; words without an option need none (all of them are positionals)."""
    if not any(is_option(token) for token in tokens):
        return Scan((), tuple(tokens))
    return scan(tokens, _vocabulary(), own_options)


def owned_word(words: Sequence[str], owned: Collection[str]) -> Owned | None:
    """The first of WORDS (vLLM flags ``scan`` accepted) that vLLM's parser reads as a flag in OWNED: itself, an
    alias or inverse (one dest), a unique prefix, or underscores for dashes (``kvdoctor.core.owned_flags``)."""
    from kvdoctor.core.vllm._generated.server_flags import VLLM_FLAG_DESTS

    return find_owned(words, _vocabulary(), VLLM_FLAG_DESTS, owned)


def parse_vllm_launch_line(tokens: Sequence[str], *, own_options: Collection[str] = ()) -> LaunchLine:
    """MODEL (positional, ``vllm serve``'s model_tag, or ``--model``) and the vLLM flags."""
    before, after, launcher = split_launcher(tokens, LAUNCHERS)
    head, tail = _scan(before, own_options), _scan(after, own_options)
    options = [*head.options, *tail.options]
    positionals = [*head.positionals, *tail.positionals]
    named = [o.values[-1] for o in options if o.name in MODEL_FLAGS and o.values]
    if len(positionals) > 1:
        raise FlagError(
            f"unexpected argument {shown(positionals[1])!r} after MODEL {shown(positionals[0])!r} "
            "(vLLM flags start with --)"
        )
    if named and positionals and positionals[0] != named[-1]:
        raise FlagError(f"MODEL {shown(positionals[0])!r} and --model {shown(named[-1])!r} name different models")
    model = named[-1] if named else positionals[0] if positionals else None
    if model is None:
        raise FlagError("missing MODEL: give a config.json path, model directory, bundled fixture or cached Hub id")
    argv = tuple(w for o in options if o.name not in MODEL_FLAGS for w in (o.name, *o.values))
    return LaunchLine(model, argv, launcher)


def _one(option: Option) -> str:
    if len(option.values) != 1:
        raise FlagError(f"vLLM flags: argument {option.name}: expected one argument")
    return option.values[0]


def _positive_int(option: Option) -> int:
    text = _one(option)
    try:
        value = int(text)
    except ValueError:
        raise FlagError(f"vLLM flags: argument {option.name}: invalid int value: {shown(text)!r}") from None
    if value <= 0:
        raise FlagError(f"vLLM flags: argument {option.name}: must be a positive integer, got {text}")
    return value


def _choice(option: Option, choices: Collection[str]) -> str:
    value = _one(option)
    if value not in choices:
        raise FlagError(
            f"vLLM flags: argument {option.name}: invalid choice: {shown(value)!r} (choose from {', '.join(choices)})"
        )
    return value


def parse_kv_transfer_config(text: str) -> dict[str, Any]:
    """``--kv-transfer-config`` JSON as vLLM reads it into ``KVTransferConfig`` (extra keys forbidden)."""
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        raise FlagError(f"--kv-transfer-config: malformed JSON ({shown(str(exc), 200)})") from None
    if not isinstance(value, dict):
        raise FlagError(f"--kv-transfer-config: a JSON object is required, got {type(value).__name__}")
    unknown = sorted(set(value) - KV_TRANSFER_KEYS)
    if unknown:
        raise FlagError(
            f"--kv-transfer-config: unknown field(s) {', '.join(shown(k) for k in unknown)} "
            "(KVTransferConfig forbids extra fields, config/kv_transfer.py)"
        )
    connector = value.get("kv_connector")
    if connector is not None and not isinstance(connector, str):
        raise FlagError("--kv-transfer-config: kv_connector must be a string")
    role = value.get("kv_role")
    if role is not None and role not in KV_ROLES:
        raise FlagError(
            f"--kv-transfer-config: unsupported kv_role {shown(str(role))!r} (one of {', '.join(KV_ROLES)})"
        )
    extra = value.get("kv_connector_extra_config")
    if extra is not None and not isinstance(extra, dict):
        raise FlagError("--kv-transfer-config: kv_connector_extra_config must be a JSON object")
    module = value.get("kv_connector_module_path")
    if connector is not None and module is None and connector not in rules.CONNECTORS:
        known = ", ".join(sorted(rules.CONNECTORS))
        raise FlagError(
            f"--kv-transfer-config: unknown connector {shown(connector)!r}: not one vLLM "
            f"{rules.VLLM_VERSION} registers ({known})"
        )
    return value


def parse_vllm_flags(argv: Sequence[str], *, own_options: Collection[str] = ()) -> VllmFlags:
    """Parse vLLM server flags (no MODEL) into ``VllmFlags``; unmodelled vLLM flags are kept."""
    found = _scan(argv, own_options)
    options, positionals = found.options, found.positionals
    if positionals:
        raise FlagError(f"unexpected argument {shown(positionals[0])!r} among the vLLM flags")
    values: dict[str, Any] = {}
    not_modelled: list[str] = []
    kv_dtypes = tuple(rules.KV_DTYPE_BYTES)
    booleans = _boolean_spellings() if options else {}
    for o in options:
        if o.name in booleans:
            name, value = booleans[o.name]
            values[name] = value
        elif o.name == "--kv-cache-dtype":
            values["kv_cache_dtype"] = _one(o)
            if values["kv_cache_dtype"] not in kv_dtypes:
                not_modelled.append(f"{o.name} {values['kv_cache_dtype']}")
        elif o.name == "--dtype":
            values["dtype"] = _one(o)
        elif o.name == "--block-size":
            values["block_size"] = _positive_int(o)
        elif o.name in ("--tensor-parallel-size", "-tp"):
            values["tensor_parallel_size"] = _positive_int(o)
        elif o.name == "--mamba-cache-dtype":
            values["mamba_cache_dtype"] = _choice(o, rules.STATE_DTYPES)
        elif o.name == "--mamba-ssm-cache-dtype":
            values["mamba_ssm_cache_dtype"] = _choice(o, rules.STATE_DTYPES)
        elif o.name == "--mamba-cache-mode":
            values["mamba_cache_mode"] = _choice(o, ("align", "none"))
        elif o.name == "--kv-offloading-size":
            text = _one(o)
            try:
                size = float(text)
            except ValueError:
                raise FlagError(f"vLLM flags: --kv-offloading-size: not a number of GiB: {shown(text)!r}") from None
            if not size > 0:
                raise FlagError(f"vLLM flags: --kv-offloading-size: must be > 0 GiB, got {text}")
            values["kv_offloading_size"] = size
        elif o.name == "--kv-offloading-backend":
            values["kv_offloading_backend"] = _choice(o, OFFLOADING_BACKENDS)
        elif o.name == "--kv-transfer-config":
            values["kv_transfer_config"] = parse_kv_transfer_config(_one(o))
        elif o.name == "--max-model-len":
            values["max_model_len"] = _one(o)  # converted below, once vLLM's grammar has accepted it
        else:
            not_modelled.append(" ".join((o.name, *o.values)))
    if options:  # vLLM's grammar, beyond kvdoctor's reading
        check_values([o for o in options if o.name in _modelled()], _vocabulary())
    if "max_model_len" in values:
        values["max_model_len_text"] = values["max_model_len"]
        values["max_model_len"] = _max_model_len(values["max_model_len"])
    return VllmFlags(**values, not_modelled=tuple(not_modelled))


def _max_model_len(text: str) -> int:
    """``--max-model-len`` as vLLM reads it (rules.MAX_LEN_FLAG: ``1k``, ``1K``, ``auto``/``-1``), then the two
    checks ``ModelConfig`` makes whatever the model: ``Field(ge=-1)`` (rules.MAX_LEN_FIELD) and a positive
    length once resolved (rules.MAX_LEN_POSITIVE: only 0 can reach it). Both are exit 2, in vLLM's words."""
    from kvdoctor.core.vllm._generated.server_flags import VLLM_FLAG_VALUES

    convert, _ = CONVERTERS[VLLM_FLAG_VALUES["--max-model-len"][0]]
    value = int(convert(text))  # check_values has run: the grammar accepts it
    if value < -1:
        raise FlagError(
            f"vLLM flags: --max-model-len {shown(text)}: Input should be greater than or equal to -1 "
            f"(ModelConfig.max_model_len, {rules.MAX_LEN_FIELD.where})"
        )
    if value == 0:
        raise FlagError(
            "vLLM flags: --max-model-len 0: max_model_len must be a positive integer, got int: 0. "
            f"Example: max_model_len=2048 ({rules.MAX_LEN_POSITIVE.where})"
        )
    return value
