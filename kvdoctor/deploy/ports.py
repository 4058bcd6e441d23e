"""Free TCP ports for one PD deployment.

Why: parallel CI jobs on one host collide on SGLang's fixed defaults (bootstrap 8998, router
Prometheus 29000); every port the run binds is chosen free unless the user pins it. A pinned port
is checked free before anything starts: a server already listening there would otherwise answer
the health checks for the one kvdoctor is about to start (a false pass on a foreign server).
"""

from __future__ import annotations

import contextlib
import errno
import socket
from collections.abc import Iterable, Mapping

from kvdoctor._exceptions import InputError


def address_family(host: str) -> socket.AddressFamily:
    """The family ``host`` binds with (``::1`` is IPv6); an unknown name is bad input."""
    try:
        info = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise InputError(f"--host {host!r} does not resolve: {exc}") from None
    return info[0][0]


def free_ports(count: int, *, host: str = "127.0.0.1", avoid: Iterable[int] = ()) -> list[int]:
    """``count`` distinct ports the OS reports free right now (all bound at once, so distinct)."""
    family = address_family(host)
    taken = set(avoid)
    ports: list[int] = []
    with contextlib.ExitStack() as stack:
        while len(ports) < count:
            sock = stack.enter_context(socket.socket(family, socket.SOCK_STREAM))
            try:
                sock.bind((host, 0))
            except OSError as exc:
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
