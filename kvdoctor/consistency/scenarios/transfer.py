"""``--scenario transfer``: every request crosses the PD transfer (the prefill's send, the pressured decode's
commit) with nothing retracted on either decode (both roomy), every token against the same transfer without the
fault.

Shared: the result (:class:`TransferResult`, the ``transfer`` evidence beside preempt's keys) and the transfer gate
in the pressure gate's place (:func:`kvdoctor.consistency.gates.transfer`: every request seen sent and committed by
kvdoctor's observer, nothing retracted). The plan and the observer are the server's part
(``consistency/servers/sglang/transfer.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from kvdoctor.consistency import gates
from kvdoctor.consistency.gates import Gate
from kvdoctor.consistency.result import ConsistencyResult

if TYPE_CHECKING:
    from kvdoctor.consistency.deploy import Deployment
    from kvdoctor.consistency.prepared import Prepared

__all__ = ["SCENARIO", "TransferDoc", "TransferResult"]


class TransferDoc(TypedDict, total=False):
    """``--scenario transfer``'s evidence (``kvdoctor.consistency.servers.sglang.transfer``): what kvdoctor's observer
    counted inside the servers during the pressured burst, by distinct bootstrap room (one per request)."""

    requests: int  # the pressured burst's requests
    recurrent: bool  # the model has recurrent state: each request's state must be sent too
    sent: int | None  # rooms the prefill sent (MooncakeKVManager.send_aux)
    state_sent: int | None  # rooms whose state components the prefill sent (maybe_send_extra; None: no state)
    committed: int | None  # rooms the pressured decode committed (DecodeTransferQueue._commit_transfer_to_req)
    source: str  # where the counts come from (the site hook log)


@dataclass(frozen=True)
class TransferResult(ConsistencyResult):
    """``--scenario transfer``: every request crosses the PD transfer (prefill's send, decode's commit) with no
    retraction on either decode (both roomy); a separate class, so a preempt run's JSON keeps exactly its keys."""

    scenario: str = "transfer"
    transfer: TransferDoc = field(default_factory=TransferDoc)

    def evidence(self) -> str:
        """The requests the observer saw committed after the transfer, and the pressured decode's retractions."""
        done, sent = self.transfer.get("committed"), self.transfer.get("requests")
        both = f"{done if done is not None else '?'}/{sent if sent is not None else '?'} requests transferred"
        return f"{both}, {super().evidence()}"


class Transfer:
    name = "transfer"
    proof = (
        "SGLang's PD transfer (--topology pd), proven by kvdoctor's observer on the prefill's send and the decode's "
        "commit"
    )
    result_class = TransferResult
    acted_on = "resumed request(s)"

    def judge(self, result: ConsistencyResult, evidence: Mapping[str, Any], server: str) -> tuple[Gate, ...]:
        assert isinstance(result, TransferResult)  # in the pressure gate's place: nothing may retract
        retracted = (result.retractions.get("pressured"), result.retractions.get("reference"))
        return (gates.transfer(result.transfer, retracted, result.retraction_source),)

    def head_lines(self, prepared: Prepared, preview: Deployment) -> list[str]:
        return []

    def result_lines(self, result: ConsistencyResult) -> list[str]:
        return []


SCENARIO = Transfer()
