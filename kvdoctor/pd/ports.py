"""Free TCP ports for one PD deployment.

Why: parallel CI jobs on one host collide on SGLang's fixed defaults (bootstrap 8998, router
Prometheus 29000); every port the run binds is chosen free unless the user pins it.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterable


def free_ports(count: int, *, host: str = "127.0.0.1", avoid: Iterable[int] = ()) -> list[int]:
    """``count`` distinct ports the OS reports free right now (all bound at once, so distinct)."""
    taken = set(avoid)
    ports: list[int] = []
    with contextlib.ExitStack() as stack:
        while len(ports) < count:
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            port = sock.getsockname()[1]
            if port not in taken:
                taken.add(port)
                ports.append(port)
    return ports
