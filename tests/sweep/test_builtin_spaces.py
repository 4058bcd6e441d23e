"""The built-in spaces: every flag one the server's own parser takes, every value one it accepts, every default the
parser's own (read from the generated table, not restated)."""

from __future__ import annotations

from kvdoctor.core.sglang import sweep as sglang_sweep
from kvdoctor.core.sglang._generated.server_flags import SGLANG_FLAG_VALUES, SGLANG_SERVER_FLAGS
from kvdoctor.core.vllm._generated.server_flags import VLLM_FLAG_VALUES, VLLM_SERVER_FLAGS
from kvdoctor.sweep.covering import coverage, plan
from kvdoctor.sweep.space import Factor, Space
from kvdoctor.sweep.spaces import builtin


def _sglang() -> Space:
    factors = tuple(
        Factor(flag, sglang_sweep.tried(flag, values), sglang_sweep.default(flag), why, topology)  # type: ignore[arg-type]
        for flag, values, why, topology in sglang_sweep.ROWS
    )
    return Space("sglang", factors)


def test_sglangs_space_is_held_to_its_parser() -> None:
    space = _sglang()
    space.check(SGLANG_FLAG_VALUES.get, SGLANG_SERVER_FLAGS.__contains__)
    flags = [f.flag for f in space.factors]
    assert len(set(flags)) == len(flags) >= 12
    assert space.factor("--schedule-policy").default == "fcfs"  # SGLang's parser's default
    assert space.factor("--chunked-prefill-size").default is None  # decided at start-up
    assert space.factor("--mamba-radix-cache-strategy").values == SGLANG_FLAG_VALUES["--mamba-radix-cache-strategy"][2]
    assert all(f.why for f in space.factors)


def test_vllms_space_is_held_to_its_parser() -> None:
    space = builtin("vllm")
    space.check(VLLM_FLAG_VALUES.get, VLLM_SERVER_FLAGS.__contains__)
    assert space.factor("--async-scheduling").default is None  # vLLM decides at start-up
    assert space.factor("--mamba-ssm-cache-dtype").default == "auto" and space.factor("--mamba-ssm-cache-dtype").shared
    assert space.factor("--mamba-cache-mode").values == VLLM_FLAG_VALUES["--mamba-cache-mode"][2]
    assert all(f.why for f in space.factors)
    assert coverage(space, plan(space)).fraction == 1.0


def test_sglangs_pairwise_plan_is_small_and_covers_every_pair() -> None:
    for topology in ("single", "pd"):
        space = _sglang().for_topology(topology)
        cells = plan(space)
        assert coverage(space, cells).fraction == 1.0
        assert len(cells) <= 25, len(cells)  # a covering array: the product is thousands


def test_a_pd_decodes_page_size_is_its_prefills() -> None:
    """Over PD the transfer addresses the prefill's pages in the decode's: every server runs the configuration's page
    size (the prefill is the reference's too); on one server the page size is the subject's alone."""
    pd, single = builtin("sglang", "pd"), builtin("sglang", "single")
    assert pd.factor("--page-size").shared and not single.factor("--page-size").shared
    config = next(c for c in plan(pd.for_topology("pd")) if c.get("--page-size") == 16)
    assert "--page-size" in config.shared_argv(pd) and "--page-size" not in config.subject_argv(pd)
    assert pd.factor("--mamba-ssm-dtype").shared and single.factor("--mamba-ssm-dtype").shared
