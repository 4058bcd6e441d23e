from __future__ import annotations

import pytest

from tests.core.conftest import HOPPER, run

DECODE = ("--disaggregation-mode", "decode")


def _codes(a) -> set[str]:
    return {h.code.split("-", 1)[0] for h in a.hazards}


def test_swa_pool_is_the_ratio_of_the_capped_full_pool_floored_to_pages() -> None:
    s = run("gpt-oss-20b", "--max-total-tokens", "10000", "--page-size", "64", "--swa-full-tokens-ratio", "0.5").sizing
    assert (s.full_tokens, s.swa_tokens, s.swa_ratio_source) == (9984, 4992, "flag")


def test_inkling_override_applies_only_when_the_ratio_is_unset() -> None:
    s = run("inkling-small", "--max-total-tokens", "65536", platform=HOPPER).sizing
    assert (s.swa_full_tokens_ratio, s.mamba_full_memory_ratio) == (0.1, 0.1)
    assert s.swa_tokens == 6553
    assert run("inkling-small", "--max-total-tokens", "65536").sizing.swa_tokens == 6528  # fa4: 128-token pages
    assert run("inkling-small", "--swa-full-tokens-ratio", "0.5").sizing.swa_full_tokens_ratio == 0.5
    assert run("gpt-oss-20b").sizing.swa_full_tokens_ratio == 0.8


def test_requests_fit_is_bounded_by_the_tightest_pool() -> None:
    s = run("llama-3.1-8b", "--max-total-tokens", "65536").sizing
    assert s.requests_fit(2048, None) == 32
    assert s.requests_fit(2000, None) == 32  # page size 1: no rounding
    s = run("llama-3.1-8b", "--max-total-tokens", "65536", "--page-size", "128").sizing
    assert s.requests_fit(2000, None) == 32  # 2000 -> 2048 per request
    assert run("llama-3.1-8b").sizing.requests_fit(2048, None) is None  # no bound: GPU memory decides


def test_mamba_slots_bound_requests_when_given() -> None:
    a = run("qwen3-next-80b-a3b", *DECODE, "--max-total-tokens", "1000000", "--max-mamba-cache-size", "16")
    assert a.sizing.mamba_slots_per_request == 1  # decode without radix cache
    assert a.sizing.requests_fit(1000, None) == 16


@pytest.mark.parametrize(
    ("model", "flags", "slots"),
    [
        ("qwen3-next-80b-a3b", (), 5),  # auto -> extra_buffer (overlap schedule on): 3 + 2 tracking
        ("qwen3-next-80b-a3b", ("--disable-overlap-schedule",), 3),  # page 1, no overlap -> no_buffer
        # On Blackwell the Qwen3.5-family override writes page 1 over --page-size 64 (triton, radix on).
        ("qwen3-next-80b-a3b", ("--disable-overlap-schedule", "--page-size", "64"), 3),
        ("qwen3-next-80b-a3b", ("--mamba-radix-cache-strategy", "extra_buffer_lazy"), 4),
        ("qwen3-next-80b-a3b", ("--disable-radix-cache",), 1),
        ("mamba2-2.7b", (), 3),  # not an extra_buffer architecture
        ("inkling-small", (), 5),
    ],
)
def test_mamba_slots_per_request(model: str, flags: tuple[str, ...], slots: int) -> None:
    assert run(model, *flags).sizing.mamba_slots_per_request == slots


def test_host_pool_on_a_recurrent_model_is_an_error() -> None:
    bad = run("inkling-small", *DECODE, "--disaggregation-decode-retraction-backup", "host_pool")
    assert "KVD001" in _codes(bad)
    assert any(h.severity == "error" for h in bad.hazards)
    assert "KVD001" not in _codes(run("inkling-small", *DECODE))
    host_pool = ("--disaggregation-decode-retraction-backup", "host_pool")
    assert "KVD001" not in _codes(run("llama-3.1-8b", *DECODE, *host_pool))


def test_fp4_scales_are_dropped_by_the_cpu_copy() -> None:
    assert "KVD002" in _codes(run("llama-3.1-8b", *DECODE, "--kv-cache-dtype", "nvfp4", "--enable-priority-scheduling"))
    assert "KVD002" not in _codes(run("llama-3.1-8b", *DECODE, "--kv-cache-dtype", "mxfp8", "--page-size", "128"))
    assert "KVD002" not in _codes(run("llama-3.1-8b", "--kv-cache-dtype", "nvfp4"))  # no retraction backup off decode


def test_none_backend_warns_that_requests_are_aborted() -> None:
    a = run("llama-3.1-8b", *DECODE, "--disaggregation-decode-retraction-backup", "none")
    assert "KVD003" in _codes(a)


@pytest.mark.parametrize(
    ("flags", "code"),
    [(("--page-size", "48"), "KVD006"), (("--page-size", "128"), None)],
)
def test_mxfp8_page_size_must_be_a_multiple_of_32(flags: tuple[str, ...], code: str | None) -> None:
    codes = _codes(run("llama-3.1-8b", "--kv-cache-dtype", "mxfp8", *flags, "--attention-backend", "fa4"))
    assert "KVD006" not in codes  # fa4 on SM100 takes page 128 whatever --page-size says
    assert "KVD008" not in codes and "KVD014" not in codes  # Blackwell: SGLang accepts mxfp8
    hopper = _codes(run("llama-3.1-8b", "--kv-cache-dtype", "mxfp8", *flags, platform=HOPPER))
    assert ("KVD006" in hopper) == (code is not None)
    assert {"KVD008", "KVD014"} <= hopper  # Hopper: SGLang refuses mxfp8 at start-up


def test_mxfp8_head_dim_and_mla() -> None:
    from tests.core.conftest import fixture_with

    mxfp8 = ("--kv-cache-dtype", "mxfp8", "--page-size", "32")
    assert "KVD005" in _codes(fixture_with("llama-3.1-8b", *mxfp8, head_dim=80))
    assert "KVD005" not in _codes(fixture_with("llama-3.1-8b", *mxfp8, head_dim=96))
    assert "KVD007" in _codes(run("deepseek-v3", "--kv-cache-dtype", "mxfp8", "--page-size", "64"))


def test_unmodelled_flags_are_reported() -> None:
    assert "KVD009" in _codes(run("llama-3.1-8b", "--quantization", "fp8"))
    assert "KVD009" not in _codes(run("llama-3.1-8b"))


@pytest.mark.parametrize(
    ("model", "flags", "dropped"),
    [
        # host_pool: only the page-interleaved MXFP8 layout has a host pool that carries scales.
        ("llama-3.1-8b", ("--kv-cache-dtype", "mxfp8", "--page-size", "128"), False),
        ("llama-3.1-8b", ("--kv-cache-dtype", "mxfp8", "--page-size", "64"), True),
        ("llama-3.1-8b", ("--kv-cache-dtype", "nvfp4"), True),
        ("gpt-oss-20b", ("--kv-cache-dtype", "mxfp8", "--page-size", "32"), True),
        # cpu_tensor: the MLA FP4 pool copies the latent row only.
        ("deepseek-v3", ("--kv-cache-dtype", "nvfp4"), True),
        ("deepseek-v3", ("--kv-cache-dtype", "fp8_e4m3"), False),
    ],
)
def test_block_scales_a_backup_path_leaves_behind(model: str, flags: tuple[str, ...], dropped: bool) -> None:
    a = run(model, *DECODE, *flags)
    assert ("KVD002" in _codes(a)) == dropped


def test_interleaved_mxfp8_scales_need_head_dim_128() -> None:
    # gpt-oss has head_dim 64: fine with flat scales, refused by the page-128 interleaved store.
    assert "KVD010" in _codes(run("gpt-oss-20b", "--kv-cache-dtype", "mxfp8", "--page-size", "128"))
    assert "KVD010" not in _codes(run("gpt-oss-20b", "--kv-cache-dtype", "mxfp8", "--page-size", "64"))
    assert "KVD010" not in _codes(run("llama-3.1-8b", "--kv-cache-dtype", "mxfp8", "--page-size", "128"))
