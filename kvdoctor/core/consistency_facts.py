"""What ``kvdoctor consistency``'s shared modules need to know about a server, torch-free: one record per server.

Each server's record lives in its room (``core/<server>/consistency_facts.py``), named by one line of
:data:`TABLE` and read through :func:`kvdoctor.core.servers.lookup`, so ``--shrink``, the pressure gate and the
terminal lines ask :func:`consistency_facts` instead of branching on the server's name. What the server calls a
request giving its memory back (the noun) and how a sentence names the server are :class:`ServerFacts`'
(``kvdoctor.core.servers.facts``); this record holds the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field

from kvdoctor.core.paths import ActsOn, StatePath
from kvdoctor.core.record import record
from kvdoctor.core.servers import Server, lookup

__all__ = ["TABLE", "ConsistencyFacts", "consistency_facts"]


@record(frozen=True)
class ConsistencyFacts:
    """One server's part of a consistency run that shared code words or sizes differently per server.

    ``mamba_state`` is the Mamba2 state ``--shrink`` gives a hybrid for this server's pools (heads, head dim, SSM
    state size, groups under NemotronH's field names); ``shrinks_untied_mamba`` whether a model whose Mamba width
    is tied to nothing (NemotronH) gets it too or keeps its full-size state. ``pressed`` and
    ``pressure_consequence`` finish the pressure gate's sentences. ``fault_site`` is where an ``--inject`` fault
    runs (``{hook}``: ``fault_hooks`` by the fault's state path, ``""`` for every other path); ``fault_tally`` how a
    run's fault counts read (``installed``, ``backups``, ``restores``, ``on``: what it acted on) and
    ``fault_problem`` the word for a fault that did not work. ``fault_words``: how the fault-fired gate words a
    fault on a path this server serves in its own way (``kvdoctor.core.paths.acts_on``: a fault's own words first,
    these next, the path's last)."""

    mamba_state: Mapping[str, int]
    shrinks_untied_mamba: bool
    pressed: str  # "retracted" | "preempted"
    pressure_consequence: str
    fault_site: str
    fault_hooks: Mapping[str, str]  # by StatePath ("": every other path)
    fault_tally: str
    fault_problem: str
    fault_words: Mapping[StatePath, ActsOn] = field(default_factory=dict)

    def fault_hook(self, path: StatePath | None) -> str:
        """The server code an ``--inject`` fault on PATH is installed on (None: a fault the registry does not
        know)."""
        return self.fault_hooks.get(path or "", self.fault_hooks[""])


# One line per server: its room's record. A third server adds its line (a test may patch one in).
TABLE: dict[str, str] = {
    Server.SGLANG.value: "kvdoctor.core.sglang.consistency_facts:FACTS",
    Server.VLLM.value: "kvdoctor.core.vllm.consistency_facts:FACTS",
}


def consistency_facts(server: Server | str) -> ConsistencyFacts:
    """SERVER's record (its room imported on first use; KeyError naming the known servers for one without)."""
    return lookup(TABLE, server, "consistency facts")
