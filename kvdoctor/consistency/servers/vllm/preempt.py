"""``--scenario preempt`` on vLLM: both servers with the same flags, the pressured one's pool too small for the
workload's concurrent demand, so vLLM's scheduler preempts (``Scheduler._preempt_request``) and recomputes on resume;
every answer is :class:`~kvdoctor.consistency.servers.vllm.part.VllmPart`'s. The faults on a resumed request run here
(the preemption path's scenario, ``kvdoctor.core.paths``)."""

from __future__ import annotations

from kvdoctor.consistency.servers.vllm.part import VllmPart

__all__ = ["PART"]

PART = VllmPart()
