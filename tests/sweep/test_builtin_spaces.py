"""The built-in spaces: every flag one the server's own parser takes, every value one it accepts, every default the
parser's own (read from the generated table, not restated)."""

from __future__ import annotations

from kvdoctor.core.sglang import sweep as sglang_sweep
from kvdoctor.core.sglang._generated.server_flags import SGLANG_FLAG_VALUES, SGLANG_SERVER_FLAGS
from kvdoctor.sweep.covering import coverage, plan
from kvdoctor.sweep.space import Factor, Space


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


def test_sglangs_pairwise_plan_is_small_and_covers_every_pair() -> None:
    for topology in ("single", "pd"):
        space = _sglang().for_topology(topology)
        cells = plan(space)
        assert coverage(space, cells).fraction == 1.0
        assert len(cells) <= 25, len(cells)  # a covering array: the product is thousands
