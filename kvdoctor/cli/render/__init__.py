"""The CLI floor's one per-server table: how each server's answers are drawn in a terminal, one object per server.

A :class:`Renderer` is a server's room in the CLI (``cli/render/<server>.py``): the ``InspectRun`` that draws
``inspect --server S``'s tables (the answer is its API room's job, ``kvdoctor.api._servers``), and the lines a round
trip on that server's pools adds (what it used, why a row is red). One line of :data:`RENDERERS` names it, and it is
imported only when that server is asked about: an SGLang question loads nothing of vLLM's tables. The commands reach
it through :func:`renderer` and never ask which server they were given; a third server is one more room and one more
line here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kvdoctor.core.record import record
from kvdoctor.core.servers import Server, lookup

if TYPE_CHECKING:
    from kvdoctor.cli.inspect_run import InspectRun
    from kvdoctor.roundtrip.result import ComponentCheck, RoundtripResult

__all__ = ["RENDERERS", "Renderer", "renderer"]

# One line per server: its room's Renderer, imported when that server is first asked about.
RENDERERS: dict[Server | str, str] = {
    Server.SGLANG: "kvdoctor.cli.render.sglang:RENDERER",
    Server.VLLM: "kvdoctor.cli.render.vllm:RENDERER",
}

Pairs = list[tuple[str, object]]


@record(frozen=True)
class Renderer:
    """One server's room in the CLI: ``inspect``'s run (its tables), and a round trip's ``used`` block (the facts of
    what ran, one pair per line) and the sentence for each red row."""

    inspect_run: type[InspectRun]
    roundtrip_used: Callable[[RoundtripResult], Pairs]
    roundtrip_why: Callable[[ComponentCheck, RoundtripResult], str]


def renderer(server: Server | str) -> Renderer:
    """SERVER's :class:`Renderer` (its line of :data:`RENDERERS`; a server without one is a KeyError naming it)."""
    found: Renderer = lookup(RENDERERS, server, "renderer")
    return found
