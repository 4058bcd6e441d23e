"""The matrix ``drift --server vllm`` runs (``kvdoctor.core.vllm.matrix``), pure: no vLLM needed (main suite;
tests/engines/vllm is skipped whole where vLLM is not installed).

Its fixtures are exactly the bundled ones ``inspect --server vllm`` answers for; its launch lines are valid vLLM
lines to kvdoctor's own parser, named uniquely, and their values come from the generated flag table.
"""

from __future__ import annotations

import pytest

from kvdoctor._exceptions import InputError
from kvdoctor.core.config import bundled_fixtures
from kvdoctor.core.vllm import matrix
from kvdoctor.core.vllm.analysis import analyze_vllm
from kvdoctor.core.vllm.flags import parse_vllm_flags
from tests.engines.vllm.test_vllm_agrees import FIXTURES


def test_the_fixtures_are_exactly_those_inspect_server_vllm_answers_for() -> None:
    accepted = []
    for name in sorted(bundled_fixtures()):
        try:
            analyze_vllm(name, ())
        except InputError:
            continue
        accepted.append(name)
    assert matrix.vllm_fixtures() == accepted
    assert set(FIXTURES) <= set(accepted)  # every fixture the vLLM suite names is in the drift matrix


@pytest.mark.parametrize("mamba", [False, True], ids=["attention", "mamba"])
def test_every_launch_line_parses_and_names_are_unique(mamba: bool) -> None:
    cases = matrix.cases_for(mamba)
    assert len({c.name for c in cases}) == len(cases) and cases[0].name == matrix.BASE
    seen = set()
    for case in cases:
        flags = parse_vllm_flags(case.argv)
        assert not flags.not_modelled, case  # every flag of the matrix reaches the rule model
        seen.add((flags.tensor_parallel_size, flags.kv_cache_dtype, flags.transfer is not None, flags.prefix_caching))
        seen.add(("mode", flags.mamba_cache_mode))
    assert {s for s in seen if s[0] != "mode"} == {
        (tp, d, off, pre) for tp in (1, 2) for d in ("auto", "fp8") for off in (False, True) for pre in (True, False)
    }
    modes = {s[1] for s in seen if s[0] == "mode"}
    assert modes == ({None, "align", "none"} if mamba else {None})


def test_the_mamba_modes_come_from_the_generated_flag_table(monkeypatch: pytest.MonkeyPatch) -> None:
    table = dict(matrix.VLLM_FLAG_VALUES)
    table["--mamba-cache-mode"] = ("str", None, ("align", "none", "all"))
    monkeypatch.setattr(matrix, "VLLM_FLAG_VALUES", table)
    assert {c.name for c in matrix.cases_for(True)} >= {"mamba-all", "tp2+fp8+offload+no-prefix+mamba-all"}


def test_a_flag_the_table_lacks_is_a_kvdoctor_bug_not_a_stale_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(matrix, "VLLM_SERVER_FLAGS", matrix.VLLM_SERVER_FLAGS - {"--kv-offloading-size"})
    with pytest.raises(matrix.MatrixError, match="--kv-offloading-size is not a vLLM"):
        matrix.cases_for(False)


def test_only_models_with_mamba_layers_get_the_mamba_cases() -> None:
    hybrids = [m for m in matrix.vllm_fixtures() if matrix.has_mamba(m)]
    assert hybrids == [
        "granite-4.0-h-small",
        "granite-4.0-micro",
        "nemotron-h-8b",
        "nemotron-h-8b-lbt",
        "qwen3-next-80b-a3b",
    ]
    # every model with Mamba layers gets the mamba cases; granite-4.0-micro's class is a Mamba2 hybrid (vLLM's
    # IsHybrid, so its mamba cache modes still apply) whose layer_types are all attention
    assert all(
        analyze_vllm(m, ()).specs.has_mamba == (m in hybrids)
        for m in matrix.vllm_fixtures()
        if m != "granite-4.0-micro"
    )
    assert not analyze_vllm("granite-4.0-micro", ()).specs.has_mamba
