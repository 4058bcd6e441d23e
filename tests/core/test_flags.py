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
        (["--mamba-full-memory-ratio", "0"], "must be a finite number > 0"),
        (["--hicache-ratio", "inf"], "must be a finite number > 0"),
        (["--max-total-tokens", "-5"], "must be a positive integer"),
        (["--max-total-tokens", "1.5Ki"], "decimals are not allowed"),
        (["--page-size", "0"], "must be a positive integer"),
        (["--hicache-size", "-1"], "must not be negative"),
        (["--kv-cache-dtype", "int8_g64"], "invalid choice"),
        (["--tp", "2", "--tp-size", "4"], "given twice"),
        (["--disaggregation-mode", "prefill", "--disaggregation-decode-retraction-backup", "host_pool"],
         "only supported on a PD decode server"),
        (["--disaggregation-mode", "decode", "--disaggregation-decode-retraction-backup", "host_pool",
          "--dcp-size", "2"], "does not support --dcp-size > 1"),
        (["--disaggregation-mode", "decode", "--disaggregation-decode-retraction-backup", "host_pool",
          "--enable-priority-scheduling"], "requires --disable-priority-preemption"),
        (["--disaggregation-decode-enable-offload-kvcache"], "only supported for decode side"),
        (["--disaggregation-mode", "decode", "--disaggregation-decode-host-receive-threshold", "0.5",
          "--disaggregation-decode-retraction-backup", "cpu_tensor"], "requires host_pool retraction"),
        (["--disaggregation-decode-host-receive-threshold", "0.5"], "only supported on a PD decode server"),
        (["--enable-hierarchical-cache", "--disable-radix-cache"], "mutually exclusive"),
    ],
)  # fmt: skip
def test_bad_and_contradictory_flags_raise_flag_errors(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError, match=message):
        parse_flags(argv)


def test_what_sglang_accepts_is_accepted() -> None:
    assert parse_flags(["--max-total-tokens", "64k"]).max_total_tokens == 64_000
    assert parse_flags(["--max-total-tokens", "64Ki"]).max_total_tokens == 65_536
    assert parse_flags(["--mamba-full-memory-ratio", "1.5"]).mamba_full_memory_ratio == 1.5
    # cpu_tensor on a prefill server is not refused (it simply never applies).
    assert parse_flags(["--disaggregation-decode-retraction-backup", "cpu_tensor"]).disaggregation_mode == "null"
    allowed = ["--disaggregation-mode", "decode", "--disaggregation-decode-retraction-backup", "host_pool",
               "--enable-priority-scheduling", "--disable-priority-preemption"]  # fmt: skip
    assert parse_flags(allowed).enable_priority_scheduling
