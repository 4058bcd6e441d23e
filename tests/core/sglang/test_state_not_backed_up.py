"""KVD004 (a cpu_tensor retraction leaves a component behind) fires without crashing and cites its sources.

No bundled launch reaches it today (every recurrent pool SGLang 0.5.23 builds either carries the mamba
state in its CPU copy or has the caller back it up), so the layout is flipped by hand: the state
components stay, the pool's copy no longer carries them and the request pool is not a hybrid one.
Before the fix, building the hazard's location raised AttributeError (exit 4 on any launch reaching it).
"""

from __future__ import annotations

import dataclasses

from kvdoctor.core.registry import find_hazards
from kvdoctor.core.sglang.analysis import analyze
from kvdoctor.core.sglang.hazards import STATE_NOT_BACKED_UP, Context


def test_a_component_left_behind_by_cpu_tensor_is_kvd004_with_its_citations() -> None:
    a = analyze("lfm2-1.2b", ["--disaggregation-mode", "decode"])
    assert a.backup.applies and a.backup.backend == "cpu_tensor"
    layout = dataclasses.replace(a.layout, cpu_copy_carries_mamba=False, req_to_token_pool="ReqToTokenPool")
    hazards = find_hazards("sglang", Context(a.spec, layout, a.backup, a.flags, a.sizing, a.refusals, a.platform))
    (hazard,) = [h for h in hazards if h.code == STATE_NOT_BACKED_UP.code]
    assert "conv_state" in hazard.message and "cpu_tensor" in hazard.message
    for cite in STATE_NOT_BACKED_UP.cites:
        assert hazard.where is not None and cite.where in hazard.where
