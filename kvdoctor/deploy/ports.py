"""Free TCP ports for one deployment.

Why: parallel CI jobs on one host collide on SGLang's fixed defaults (bootstrap 8998, router
Prometheus 29000); every port the run binds is chosen free unless the user pins it. A pinned port
is checked free before anything starts: a server already listening there would otherwise answer
the health checks for the one kvdoctor is about to start (a false pass on a foreign server).

Where: below the kernel's ephemeral range (``net.ipv4.ip_local_port_range``, 32768 up by default), in
:data:`PORT_RANGE`. A port is chosen free, released, and bound by the server only after its model has loaded
(uvicorn binds after start-up: tens of seconds on a CPU). In that window every other process that binds port 0
or connects out gets a port from the ephemeral range, and a server starting beside it does: each SGLang
scheduler's gloo groups listen on ports the kernel picks there (``torch.distributed``). When one took a chosen
port, the HTTP server failed to bind it and SGLang's warm-up thread went on polling it, now gloo's, which accepts
and never answers: 120 read time-outs, 12 minutes, then SGLang killed its own server (CI, stop 38: "reference
died: ... Read timed out"). SGLang picks its own later-bound ports below the range for the same reason
(``srt/utils/network.py``, ``get_free_port_below_ephemeral``: 22000-29999), and Mooncake's TCP transport listens
on a port it picks in 15000-16999 (95 of 95 in this machine's PD logs): :data:`PORT_RANGE` stays clear of both.
A machine whose ephemeral range starts at or below :data:`PORT_RANGE` gets ports from the kernel (port 0).
"""

from __future__ import annotations

import contextlib
import errno
import random
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path

from kvdoctor._exceptions import InputError


def address_family(host: str) -> socket.AddressFamily:
    """The family ``host`` binds with (``::1`` is IPv6); an unknown name is bad input."""
    try:
        info = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise InputError(f"--host {host!r} does not resolve: {exc}") from None
    return info[0][0]


# Where free ports are chosen: below the kernel's ephemeral range, between Mooncake's transfer ports (15000-16999)
# and SGLang's own later-bound ports (22000-29999).
PORT_RANGE = range(17000, 22000)
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_ports(path: Path = EPHEMERAL_RANGE_FILE) -> range:
    """The ports the kernel hands out for port 0 and outgoing connections (32768-65535 where unknown)."""
    try:
        low, high = map(int, path.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 65535
    return range(low, high + 1)


def port_pool() -> range:
    """The ports :func:`free_ports` chooses from: :data:`PORT_RANGE` below the ephemeral range (empty: none)."""
    return range(PORT_RANGE.start, min(PORT_RANGE.stop, ephemeral_ports().start))


def free_ports(count: int, *, host: str = "127.0.0.1", avoid: Iterable[int] = ()) -> list[int]:
    """``count`` distinct ports free on HOST right now, from :func:`port_pool` in random order (all held bound
    until every one is chosen, so distinct); from the kernel (port 0) once the pool has no free port left."""
    family = address_family(host)
    taken = set(avoid)
    pool = port_pool()
    candidates = iter(random.sample(pool, len(pool)))
    ports: list[int] = []
    with contextlib.ExitStack() as stack:
        while len(ports) < count:
            wanted = next((p for p in candidates if p not in taken), 0)
            sock = stack.enter_context(socket.socket(family, socket.SOCK_STREAM))
            try:
                sock.bind((host, wanted))
            except OSError as exc:
                if wanted and exc.errno in (errno.EADDRINUSE, errno.EACCES):
                    continue  # held by another process (or reserved): the next candidate
                raise InputError(f"--host {host!r}: cannot bind a port there: {exc}") from None
            port = sock.getsockname()[1]
            if port not in taken:
                taken.add(port)
                ports.append(port)
    return ports


def in_use(host: str, port: int) -> bool:
    """Whether binding ``host:port`` fails because something holds it (as the server would bind:
    with SO_REUSEADDR, so a port in TIME_WAIT counts as free)."""
    family = address_family(host)
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise InputError(f"--host {host!r}: cannot bind port {port} there: {exc}") from None
    return False


def check_free(host: str, pinned: Mapping[str, int]) -> None:
    """Each pinned port (option name → port) must be free on ``host``; else bad input (exit 2)."""
    for option, port in pinned.items():
        if in_use(host, port):
            raise InputError(
                f"{option} {port} is already in use on {host}: another process "
                "listens there (stop it or pick another port)"
            )
