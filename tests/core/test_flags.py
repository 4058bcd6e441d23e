from __future__ import annotations

import pytest

from kvdoctor.core.flags import parse_flags
from kvdoctor.errors import FlagError


def test_sglang_spellings_are_modelled_and_others_kept() -> None:
    flags = parse_flags(
        ["--kv-cache-dtype", "mxfp8", "--disaggregation-mode", "decode", "--tp", "2", "--quantization",
         "modelopt_fp4", "--trust-remote-code", "--max-total-tokens", "65536", "--enable-hicache"]
    )  # fmt: skip
    assert (flags.kv_cache_dtype, flags.disaggregation_mode, flags.tp_size) == ("mxfp8", "decode", 2)
    assert flags.max_total_tokens == 65536
    assert flags.enable_hierarchical_cache
    assert flags.not_modelled == ("--quantization modelopt_fp4", "--trust-remote-code")


def test_unset_ratios_stay_unset_so_model_overrides_can_apply() -> None:
    flags = parse_flags([])
    assert flags.swa_full_tokens_ratio is None and flags.mamba_full_memory_ratio is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--swa-full-tokens-ratio", "1.5"], r"must be in \(0, 1\]"),
        (["--mamba-full-memory-ratio", "0"], r"must be in \(0, 1\]"),
        (["--max-total-tokens", "-5"], "must be a positive integer"),
        (["--page-size", "0"], "must be a positive integer"),
        (["--hicache-size", "-1"], "must not be negative"),
        (["--kv-cache-dtype", "int8_g64"], "invalid choice"),
        (["--tp", "2", "--tp-size", "4"], "given twice"),
        (["--disaggregation-mode", "prefill", "--disaggregation-decode-retraction-backup", "host_pool"],
         "applies only to a PD decode server"),
        (["--disaggregation-decode-retraction-backup", "cpu_tensor"], "applies only to a PD decode server"),
        (["--disaggregation-decode-enable-radix-cache"], "needs --disaggregation-mode decode"),
    ],
)  # fmt: skip
def test_bad_and_contradictory_flags_raise_flag_errors(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError, match=message):
        parse_flags(argv)
