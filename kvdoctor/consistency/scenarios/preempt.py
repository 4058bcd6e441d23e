"""``--scenario preempt``: the pressured server must retract (SGLang) or preempt (vLLM) and resume its requests, the
reference none; proven by the pressured server's pressure counter (the pressure gate). A run's result is the plain
:class:`kvdoctor.consistency.result.ConsistencyResult` (pd-eval's token oracle embeds it: its keys stay as they are).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kvdoctor.consistency import gates
from kvdoctor.consistency.gates import Gate
from kvdoctor.consistency.result import ConsistencyResult

if TYPE_CHECKING:
    from kvdoctor.consistency.deploy import Deployment
    from kvdoctor.consistency.prepared import Prepared

__all__ = ["SCENARIO", "Preempt", "pressure"]


def pressure(result: ConsistencyResult, server: str) -> Gate:
    """The pressure gate: the pressured server retracted (preempted), the reference did not, in SERVER's words."""
    return gates.pressure(
        result.retractions.get("pressured"),
        result.retractions.get("reference"),
        result.retraction_source,
        **gates.pressure_words(server),
    )


class Preempt:
    name = "preempt"
    proof = "every server retracts or preempts"
    result_class = ConsistencyResult
    acted_on = "resumed request(s)"

    def judge(self, result: ConsistencyResult, evidence: Mapping[str, Any], server: str) -> tuple[Gate, ...]:
        return (pressure(result, server),)

    def head_lines(self, prepared: Prepared, preview: Deployment) -> list[str]:
        return []

    def result_lines(self, result: ConsistencyResult) -> list[str]:
        return []


SCENARIO = Preempt()
