"""What every server's ``kvdoctor roundtrip --server S`` checks before any work: the fault is that server's.

:class:`FaultChecks` is the side of a server whose every round-trip option is its own (SGLang's: kvdoctor's model of
its pools or the installed SGLang); a server whose engine reads fewer options refuses the rest in its room
(``api/_server_<server>.py``). Nothing here imports torch or a server; the faults come from where ``--inject``
lists them (``kvdoctor.roundtrip.faults``), imported when a round trip is checked: their enum is built from the
whole fault registry, which ``inspect`` never needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvdoctor.api._servers import RoundtripAsk


def check_fault(run: RoundtripAsk) -> None:
    """Exit 2 when RUN's ``--inject`` is another server's round-trip fault."""
    from kvdoctor.roundtrip.faults import check_fault as check  # the fault registry's enum: not inspect's start-up

    check(run.options.inject, server=run.server)


class FaultChecks:
    """A round trip that acts on every option it is given: only its fault is checked."""

    def check(self, run: RoundtripAsk) -> None:
        check_fault(run)
