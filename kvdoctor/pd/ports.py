"""Free TCP ports for one PD deployment.

Why: parallel CI jobs on one host collide on SGLang's fixed defaults (bootstrap 8998, router
Prometheus 29000); every port the run binds is chosen free unless the user pins it.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterable

from kvdoctor.errors import InputError


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
