"""TLS settings for every HTTP client of a run, decided once.

Why: each httpx client loads the system CA roots when built (~40 ms); a run builds a dozen clients
(health polls, metrics, shards of the eval client), almost always for plain ``http://`` URLs where
TLS is never used. So plain URLs get no verification context and ``https://`` ones share one.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def _default_context() -> ssl.SSLContext:
    return ssl.create_default_context()


def verify_for(url: str) -> ssl.SSLContext | bool:
    return _default_context() if url.startswith("https:") else False


def get(
    url: str, *, timeout_s: float, connect_s: float | None = None, follow_redirects: bool = False
) -> httpx.Response:
    timeout = httpx.Timeout(timeout_s, connect=timeout_s if connect_s is None else connect_s)
    return httpx.get(url, timeout=timeout, verify=verify_for(url), follow_redirects=follow_redirects)
