"""The CLI's per-server tables (issue 29): one line for every server the seam knows, each naming what exists.

``inspect``'s ``RUNS`` and ``JOBS``, ``drift``'s ``SIDES`` and ``roundtrip``'s ``SIDES`` are how a command reaches a
server's behaviour without branching on its name (``kvdoctor.core.servers.lookup``); a server missing from one, or a
line naming a module or attribute that is not there, would be found only when a user asked for that server.
"""

from __future__ import annotations

import pytest

from kvdoctor.api import _drift as api_drift
from kvdoctor.api import _inspect as api_inspect
from kvdoctor.api import _roundtrip as api_roundtrip
from kvdoctor.api._inspect import InspectJob
from kvdoctor.cli import inspect_cmd, versions
from kvdoctor.cli.inspect_run import InspectRun
from kvdoctor.core import servers
from kvdoctor.core.servers import Server

TABLES = {
    "inspect run": inspect_cmd.RUNS,
    "inspect job": api_inspect.JOBS,
    "drift side": api_drift.SIDES,
    "round trip": api_roundtrip.SIDES,
}


@pytest.mark.parametrize("what", sorted(TABLES))
def test_each_table_has_one_line_for_every_server_and_each_line_resolves(what: str) -> None:
    table = TABLES[what]
    assert sorted(table) == sorted(s.value for s in Server) == sorted(servers.servers())
    for server in Server:
        assert servers.lookup(table, server, what) is not None


def test_inspect_runs_are_inspect_runs_and_sides_have_their_protocols_methods() -> None:
    assert all(issubclass(servers.lookup(inspect_cmd.RUNS, s, "run"), InspectRun) for s in Server)
    assert all(issubclass(servers.lookup(api_inspect.JOBS, s, "job"), InspectJob) for s in Server)
    assert all(callable(servers.lookup(api_drift.SIDES, s, "side").all_architectures) for s in Server)
    assert all(callable(servers.lookup(api_roundtrip.SIDES, s, "side").check) for s in Server)


def test_an_engine_range_line_names_a_server_and_a_first_last_pair() -> None:
    for server in versions.ENGINE_RANGES:
        first, last = servers.lookup(versions.ENGINE_RANGES, server, "engine range")
        assert server in servers.servers() and first <= last
