"""``--scenario preempt`` on SGLang: the pressured server (under PD, the pressured decode) gets a quarter of the
workload's peak demand (``kvdoctor.consistency.deploy``), so it must retract; nothing else of the plan changes, and
every answer is :class:`~kvdoctor.consistency.servers.sglang.part.SglangPart`'s. Retraction faults and sliding-window
faults run here (their paths' scenario, ``kvdoctor.core.paths``)."""

from __future__ import annotations

from kvdoctor.consistency.servers.sglang.part import SglangPart

__all__ = ["PART"]

PART = SglangPart()
