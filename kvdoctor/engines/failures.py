"""A server's own code failing where kvdoctor asked it something: no answer, so neither drift nor kvdoctor's bug.

Both rooms (``engines/sglang``, ``engines/vllm``) say it the same way: exit 3 (:class:`DeploymentError`), one line
naming the server, what kvdoctor was doing, the error and the server's file:line. An exception no frame of the
server's raised stays kvdoctor's own (exit 4), and kvdoctor's own errors keep their codes. Each room gives its
title, how it tells a frame of its server's, and how it words the failure.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from kvdoctor._exceptions import DeploymentError, KvdoctorError

__all__ = ["failed_inside", "server_failures"]


def failed_inside(
    exc: BaseException,
    during: str,
    *,
    title: str,
    raised_in: Callable[[BaseException], bool],
    failure: Callable[[BaseException], str],
) -> DeploymentError | None:
    """EXC as exit 3 when the server TITLE's own code raised it (RAISED_IN), worded by FAILURE; None otherwise."""
    if isinstance(exc, KvdoctorError) or not isinstance(exc, Exception) or not raised_in(exc):
        return None
    return DeploymentError(f"{title} failed inside its own code during {during}: {failure(exc)}")


@contextlib.contextmanager
def server_failures(failed: Callable[[Exception], DeploymentError | None]) -> Iterator[None]:
    """Inside the block, an exception FAILED turns into exit 3 ends the run so; any other is raised as it is."""
    try:
        yield
    except Exception as exc:
        error = failed(exc)
        if error is None:
            raise
        raise error from exc
