"""A port chosen for a server must still be the server's when it binds it, tens of seconds later.

CI, stop 38: kvdoctor chose the reference server's port with ``bind(("127.0.0.1", 0))`` (the kernel's ephemeral
range) and released it; while the reference loaded its model, the pressured server's scheduler created its gloo
groups, which listen on ports the kernel hands out from that same range, and one got the reference's port. The
reference's HTTP server then failed to bind ("address already in use"), SGLang's warm-up thread polled gloo's
listener (it accepts and never answers) 120 times, and after 12 minutes SGLang killed its own server:
"reference died: ... Read timed out". Two protections, each with a twin that removes it:

- kvdoctor's free ports come from below the ephemeral range (``kvdoctor.deploy.ports``), where neither port 0
  nor an outgoing connection can land;
- a health check that times out on a listener kvdoctor's server does not own fails the wait at once, naming the
  holder (``Supervisor.wait_healthy``), instead of waiting for the deadline or for the server to kill itself.
"""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvdoctor._exceptions import ForeignServer, ServerUnhealthy
from kvdoctor.deploy import ports, supervisor
from kvdoctor.deploy.supervisor import Supervisor, listeners

pytestmark = pytest.mark.usefixtures("no_leftovers")

LOADING = (sys.executable, "-c", "import time; time.sleep(600)")  # a server still loading its model: never binds


def test_free_ports_come_from_below_the_ephemeral_range() -> None:
    low = ports.ephemeral_ports().start
    chosen = ports.free_ports(16)
    assert len(set(chosen)) == 16
    assert all(p in ports.port_pool() and p < low for p in chosen), (chosen, low)
    assert ports.port_pool().start == ports.PORT_RANGE.start and ports.port_pool().stop <= low


def test_a_held_pool_port_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", ports.free_ports(1)[0]))
        taken = held.getsockname()[1]
        pool = ports.port_pool()
        rest = [p for p in pool if p != taken]
        monkeypatch.setattr(ports.random, "sample", lambda population, k: [taken, *rest][:k])
        chosen = ports.free_ports(2)
    assert taken not in chosen and chosen == rest[:2]


def test_without_a_pool_the_kernel_chooses(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine whose ephemeral range starts below kvdoctor's pool: ports from port 0, as before."""
    real_low = ports.ephemeral_ports().start
    monkeypatch.setattr(ports, "ephemeral_ports", lambda path=None: range(ports.PORT_RANGE.start, 60999))
    assert not ports.port_pool()
    chosen = ports.free_ports(3)
    assert len(set(chosen)) == 3 and all(p >= real_low for p in chosen), chosen


def test_the_ephemeral_range_is_read_from_the_kernel(tmp_path: Path) -> None:
    (tmp_path / "range").write_text("40000\t60999\n")
    (tmp_path / "junk").write_text("none")
    assert ports.ephemeral_ports(tmp_path / "range") == range(40000, 61000)
    unknown = range(32768, 65536)
    assert ports.ephemeral_ports(tmp_path / "junk") == ports.ephemeral_ports(tmp_path / "missing") == unknown


@pytest.fixture
def taken(tmp_path: Path) -> Iterator[tuple[Supervisor, supervisor.Managed, int]]:
    """The CI case: kvdoctor's 'reference' is still loading when its port is taken by a listener of kvdoctor's
    other server ('pressured' binds it and never answers, like gloo)."""
    port = ports.free_ports(1)[0]
    holder = (sys.executable, "-c", _SILENT.format(port=port))
    with Supervisor(tmp_path / "logs") as sup:
        reference = sup.start("reference", LOADING, {})
        pressured = sup.start("pressured", holder, {})
        deadline = time.monotonic() + 60
        while not listeners(port):  # the holder has bound the port (a condition, polled with a deadline)
            sup.check_alive()
            assert time.monotonic() < deadline, "the holder never listened"
            time.sleep(0.05)
        assert pressured.pid in listeners(port)
        yield sup, reference, port


_SILENT = (
    "import socket, time\n"
    "s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(64)\n"
    "time.sleep(600)  # accepts (the kernel's backlog) and never answers\n"
)


def test_a_silent_listener_on_the_servers_port_fails_the_wait_at_once(
    taken: tuple[Supervisor, supervisor.Managed, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    sup, reference, port = taken
    monkeypatch.setattr(supervisor, "HEALTH_TIMEOUT_S", 0.5)
    started = time.monotonic()
    with pytest.raises(ForeignServer) as caught:
        sup.wait_healthy(reference, f"http://127.0.0.1:{port}/health", time.monotonic() + 120)
    assert time.monotonic() - started < 30  # not the deadline's 120 s
    message = str(caught.value)
    holder = sup.procs[1].pid
    assert message.startswith(f"reference: port {port} was taken before the server bound it: pid {holder} (")
    assert "of kvdoctor's pressured server)" in message and f"(pid {reference.pid}) could not bind it" in message


def test_without_the_check_the_wait_runs_to_its_deadline(
    taken: tuple[Supervisor, supervisor.Managed, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Teeth: with the holder not looked up, the wait learns nothing until the deadline (SGLang's own warm-up
    kills the server only after 120 read time-outs)."""
    sup, reference, port = taken
    monkeypatch.setattr(supervisor, "HEALTH_TIMEOUT_S", 0.5)
    monkeypatch.setattr(supervisor, "listeners", lambda port: [])
    with pytest.raises(ServerUnhealthy) as caught:
        sup.wait_healthy(reference, f"http://127.0.0.1:{port}/health", time.monotonic() + 3)
    assert type(caught.value) is ServerUnhealthy and "never became healthy" in str(caught.value)
