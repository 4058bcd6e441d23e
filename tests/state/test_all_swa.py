"""All-SWA models (every layer sliding, no full-attention pool) get a token index space of their own.

SGLang serves them with ``PureSWATokenToKVPoolAllocator``: token slots are SWA slots and the
full->SWA mapping is the identity (allocator/swa.py:727-770). Without that, every request would
share slot 0 and the residents would read each other's KV.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvdoctor.core.config import bundled_fixtures
from kvdoctor.core.sglang.analysis import analyze
from kvdoctor.roundtrip.options import Reductions, RoundtripOptions
from kvdoctor.roundtrip.result import RoundtripResult
from kvdoctor.state.diff import RESIDENT
from kvdoctor.state.run import run_roundtrip
from tests.state.helpers import DECODE, row


@pytest.fixture
def all_swa(tmp_path: Path) -> str:
    config = json.loads(Path(bundled_fixtures()["gpt-oss-20b"]).read_text())
    config["layer_types"] = ["sliding_attention"] * len(config["layer_types"])
    path = tmp_path / "all-swa.json"
    path.write_text(json.dumps(config))
    return str(path)


def _run(model: str, *flags: str, inject: str | None = None, tokens: int = 64) -> RoundtripResult:
    analysis = analyze(model, [*flags, *DECODE, "--disaggregation-decode-retraction-backup", "cpu_tensor"])
    assert analysis.spec.full is None and analysis.spec.swa is not None
    opts = RoundtripOptions(
        device="cpu", requests=4, tokens=tokens, inject=inject, reductions=Reductions(layers=2, heads=1)
    )
    return run_roundtrip(analysis, opts)


@pytest.mark.parametrize("flags", [("--kv-cache-dtype", "bf16"), ("--kv-cache-dtype", "fp8_e4m3")])
def test_all_swa_model_round_trips_green(all_swa: str, flags: tuple[str, ...]) -> None:
    result = _run(all_swa, *flags, tokens=200)  # longer than the 128-token window
    assert result.ok, result.failing
    assert result.used.token_index_space.startswith("swa")
    assert row(result, "swa_kv").bytes > 0 and row(result, RESIDENT).bytes > 0
    assert result.used.restored_into_new_slots is True


def test_all_swa_model_still_catches_a_dropped_swa_copy(all_swa: str) -> None:
    result = _run(all_swa, "--kv-cache-dtype", "bf16", inject="drop-swa")
    assert result.failing == ["swa_kv"]
    assert result.inject_matched is True
