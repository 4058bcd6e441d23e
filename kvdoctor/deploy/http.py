"""TLS settings for every HTTP client of a run, decided once.

Why: each httpx client loads the system CA roots when built (~40 ms); a run builds a dozen clients
(health polls, metrics, shards of the eval client), almost always for plain ``http://`` URLs where
TLS is never used. So plain URLs get no verification context and ``https://`` ones share one.
"""

from __future__ import annotations

import functools
import ssl

import httpx

from kvdoctor._exceptions import DeploymentError


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


def post(url: str, *, timeout_s: float) -> httpx.Response:
    """An empty POST (a server's admin endpoint: SGLang's ``/flush_cache``, vLLM's ``/reset_prefix_cache``)."""
    return httpx.post(url, timeout=httpx.Timeout(timeout_s), verify=verify_for(url))


def reset(url: str, timeout_s: float) -> None:
    """POST to the admin endpoint URL; ``DeploymentError`` (exit 3) when the server is unreachable or refuses."""
    try:
        reply = post(url, timeout_s=timeout_s)
    except httpx.HTTPError as exc:
        raise DeploymentError(f"POST {url} failed: {type(exc).__name__}: {exc}") from None
    if reply.status_code != 200:
        raise DeploymentError(f"POST {url} answered {reply.status_code}: {reply.text.strip()[:200]}")
