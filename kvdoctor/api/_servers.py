"""The API floor's one per-server table: what each command asks of a server, one object per server.

``inspect`` asks a server's room for its job (its launch line, rule model and engine), ``drift`` for the side it holds
kvdoctor's rules against (the installed server's own code), ``roundtrip`` for the checks it makes before any work.
Each server's object (a :class:`ServerApi`) lives in its room, ``api/_server_<server>.py``, beside the server's
``_inspect_<server>.py``; one line of :data:`SERVERS` names it, and it is imported only when that server is asked
about. The commands reach it through :func:`room` and never ask which server they were given: a third server is one
more room and one more line here (``tests/test_server_tables.py`` registers one through the tables alone).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kvdoctor._exceptions import InputError
from kvdoctor.api._job import Job
from kvdoctor.core.record import record
from kvdoctor.core.servers import Server, lookup, servers
from kvdoctor.engines import Adapter, Engine, GpuArch, Inspected

if TYPE_CHECKING:
    from kvdoctor.api._inspect_args import InspectArgs
    from kvdoctor.core.drift_result import DriftReport
    from kvdoctor.roundtrip.options import RoundtripOptions

Progress = Callable[[str, int, int], None]

# One line per server: its room's ServerApi, imported when that server is first asked about.
SERVERS: dict[Server | str, str] = {
    Server.SGLANG: "kvdoctor.api._server_sglang:SERVER",
    Server.VLLM: "kvdoctor.api._server_vllm:SERVER",
}


class InspectJobClass(Protocol):
    """A server's ``InspectJob`` subclass (``kvdoctor.api._inspect``), called as ``inspect_job`` makes one."""

    def __call__(
        self, args: InspectArgs, *, own_options: Sequence[str] = (), argv: Sequence[str] = ()
    ) -> Job[Inspected, Any]: ...


class DriftSide(Protocol):
    """One server's side of ``drift``: its engine (refused with exit 2 when it cannot drift) and the
    generated set its registry serves (``--all-architectures`` and the options that go with it)."""

    def adapter(self) -> Adapter: ...

    def all_architectures(
        self,
        cases: tuple[str, ...],
        gpu_arch: GpuArch,
        update: Progress | None,
        *,
        output_dir: Path | None,
        model_types: tuple[str, ...],
        strict: bool,
    ) -> DriftReport: ...


class RoundtripAsk(Protocol):
    """What a round trip's side reads of the run it checks (``kvdoctor.api.RoundtripJob``): the engine, the server,
    the options the caller set (``explicit``) and what the engine is asked to do (``device``, ``inject``...)."""

    engine: Engine
    server: Server | str
    explicit: frozenset[str]
    options: RoundtripOptions


class RoundtripSide(Protocol):
    """One server's round trip: :meth:`check` refuses (``InputError``) what its engine would not act on."""

    def check(self, run: RoundtripAsk) -> None: ...


@record(frozen=True)
class ServerApi:
    """One server's room in the API: the job that answers ``inspect --server S``, the side ``drift --server S`` holds
    the rules against, and what ``roundtrip --server S`` refuses before any work."""

    inspect_job: InspectJobClass
    drift_side: DriftSide
    roundtrip_side: RoundtripSide


def room(server: Server | str) -> ServerApi:
    """SERVER's :class:`ServerApi` (its line of :data:`SERVERS`; a server without one is a KeyError naming it)."""
    found: ServerApi = lookup(SERVERS, server, "API room")
    return found


def server_of(value: Server | str) -> Server | str:
    """VALUE as the ``Server`` it names, or a registered server's own name (``kvdoctor.core.servers.register``); any
    other is bad input (exit 2) naming the known servers."""
    try:
        return Server(value)
    except ValueError:
        if value in servers():
            return value
        raise InputError(f"server={value!r} is not one of {', '.join(servers())}") from None
