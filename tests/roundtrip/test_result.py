"""The round trip's result contract (``kvdoctor.roundtrip.result``): torch-free, and its JSON keys unchanged."""

from __future__ import annotations

import subprocess
import sys

from kvdoctor.core.registry import ERROR, Hazard
from kvdoctor.roundtrip.options import Reductions
from kvdoctor.roundtrip.result import HAZARD_KEYS, ComponentCheck, ModelUsed, RoundtripResult


def _check(name: str, ok: bool) -> ComponentCheck:
    return ComponentCheck(name, 8, 0 if ok else 8, ok, 1, 1, 8, 8, True, None, None, None, None, None, ok)


def _used() -> ModelUsed:
    return ModelUsed(
        "m", "MHATokenToKVPool", "full", False, False, 2, 1, 8, 1, 0, "none", 1, 0, 0, 1, None, None, 8, 64, True, 1,
        Reductions(),
    )  # fmt: skip


def _result(*hazards: Hazard) -> RoundtripResult:
    return RoundtripResult.of(
        device="cpu",
        kv_cache_dtype="auto",
        backend="cpu_tensor",
        injected=None,
        components=[_check("full_kv", True), _check("slot_reuse", False)],
        used=_used(),
        expected_red=[],
        hazards=list(hazards),
        elapsed_s=0.0,
    )


def test_a_hazard_is_published_with_the_keys_the_round_trip_always_gave_it() -> None:
    """One ``Hazard`` type for every command; the round trip's JSON keeps severity, code and message."""
    cited = Hazard(ERROR, "KVD014-SGLANG-REFUSES", "SGLang refuses", where="sglang/srt/server_args.py:1")
    body = _result(cited).body()
    assert body["hazards"] == [{"severity": "error", "code": "KVD014-SGLANG-REFUSES", "message": "SGLang refuses"}]
    assert HAZARD_KEYS == ("severity", "code", "message")
    assert list(body) == [f for f in RoundtripResult.__dataclass_fields__]  # every key, in field order


def test_the_verdict_is_derived_from_the_rows() -> None:
    result = _result()
    assert result.failing == ["slot_reuse"] and not result.ok and result.exit_code == 1
    assert result.row("full_kv").ok


def test_the_contract_imports_no_torch_and_no_pandas() -> None:
    code = (
        "import sys, kvdoctor.roundtrip.options, kvdoctor.roundtrip.result, kvdoctor.roundtrip.steps; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'pandas', 'numpy')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
