"""Named deployments that reproduce a reference PD test flag for flag.

Why data, not code: a preset is a promise that ``--dry-run`` prints exactly what the reference
test launches (order included), so it is written down once, verbatim, next to its source.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum

from kvdoctor._exceptions import InputError


class Api(str, Enum):
    """The SGLang endpoint the eval talks to (``--api``): ``/v1/completions`` as SGLang's gate, or ``/generate``."""

    COMPLETIONS = "completions"
    GENERATE = "generate"


@dataclass(frozen=True)
class EvalDefaults:
    """The accuracy gate's knobs; explicit CLI options override each one."""

    num_shots: int = 5
    num_questions: int | None = 200
    threshold: float = 0.80
    max_new_tokens: int = 512
    parallel: int = 128
    api: str = "completions"


@dataclass(frozen=True)
class Preset:
    """Server arguments per role, in the reference's order: leading, common, role tail."""

    name: str
    source: str
    leading: tuple[str, ...] = ()
    common: tuple[str, ...] = ()
    prefill_tail: tuple[str, ...] = ()
    decode_tail: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    eval: EvalDefaults = EvalDefaults()
    mini_lb: bool = False
    # Whether the preset already bounds the pool (else the plan adds --max-total-tokens).
    bounds_pool: bool = False


# test/registered/disaggregation/test_disaggregation_inkling_mxfp8.py (sglang, #35840), with the
# PD fixture of python/sglang/test/server_fixtures/disaggregation_fixture.py (0.5.23).
INKLING_MXFP8 = Preset(
    name="inkling-mxfp8",
    source="sglang test/registered/disaggregation/test_disaggregation_inkling_mxfp8.py",
    leading=("--trust-remote-code",),
    common=(
        "--tp",
        "2",
        "--quantization",
        "modelopt_fp4",
        "--attention-backend",
        "fa4",
        "--page-size",
        "128",
        "--fp4-gemm-backend",
        "flashinfer_trtllm",
        "--moe-runner-backend",
        "flashinfer_trtllm_routed",
        "--mamba-radix-cache-strategy",
        "extra_buffer",
        "--mem-fraction-static",
        "0.8",
        "--max-total-tokens",
        "65536",
        "--swa-full-tokens-ratio",
        "0.1",
        "--mamba-full-memory-ratio",
        "0.1",
        "--kv-cache-dtype",
        "mxfp8",
    ),
    prefill_tail=("--enable-hierarchical-cache",),
    decode_tail=("--base-gpu-id", "2"),
    env={"SGLANG_ENABLE_UNIFIED_RADIX_TREE": "1", "MC_TCP_ENABLE_CONNECTION_POOL": "true"},
    eval=EvalDefaults(
        num_shots=10, num_questions=200, threshold=0.80, max_new_tokens=512, parallel=128, api="completions"
    ),
    mini_lb=True,
    bounds_pool=True,
)

PRESETS: dict[str, Preset] = {INKLING_MXFP8.name: INKLING_MXFP8}


class PresetName(str, Enum):
    """The ``--preset`` choices, so ``--help`` lists them and typer refuses a typo before anything runs.

    Spelled out (not built from :data:`PRESETS`) so type checkers see the members; a test keeps the
    two equal.
    """

    INKLING_MXFP8 = "inkling-mxfp8"


def generic(tp: int) -> Preset:
    """Any model: TP per role, decode on the GPUs after prefill's, HiCache on prefill, metrics on
    decode (the retraction guard reads them)."""
    return Preset(
        name="generic",
        source="kvdoctor",
        common=("--tp", str(tp)),
        prefill_tail=("--enable-hierarchical-cache",),
        decode_tail=("--base-gpu-id", str(tp), "--enable-metrics"),
        env={"MC_TCP_ENABLE_CONNECTION_POOL": "true"},
    )


def get(name: str | PresetName) -> Preset:
    name = name.value if isinstance(name, PresetName) else name
    try:
        return PRESETS[name]
    except KeyError:
        known = ", ".join(sorted(PRESETS))
        raise InputError(f"unknown --preset {name!r} (known: {known})") from None


def with_tp(preset: Preset, tp: int) -> Preset:
    """Override TP: the ``--tp`` value, and decode's first GPU moves past prefill's."""
    return replace(
        preset,
        common=_set_value(preset.common, "--tp", str(tp)),
        decode_tail=_set_value(preset.decode_tail, "--base-gpu-id", str(tp)),
    )


def _set_value(args: tuple[str, ...], flag: str, value: str) -> tuple[str, ...]:
    out = list(args)
    for i, arg in enumerate(out[:-1]):
        if arg == flag:
            out[i + 1] = value
    return tuple(out)
