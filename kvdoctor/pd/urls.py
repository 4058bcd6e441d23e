"""The base URLs of servers someone else runs (``--prefill-url/--decode-url/--router-url``), checked
before anything starts.

Why: a URL httpx cannot use fails late and as the wrong thing. ``ftp://…`` was retried until
``--timeout`` ran out; ``http://[::1`` surfaced as a deployment failure (exit 3). Both are the
user's input (exit 2, one line): http or https, a well-formed host (name, IPv4, or bracketed IPv6),
an optional port in 1..65535, no credentials, query or fragment (the paths kvdoctor appends would
land after them).
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse

from kvdoctor._exceptions import InputError

SCHEMES = ("http", "https")
_LABEL = re.compile(r"^(?!-)[A-Za-z0-9_-]{1,63}(?<!-)$")


def check_base_url(option: str, url: str) -> str:
    """``url`` without a trailing slash, or a one-line ``InputError`` naming ``option``."""

    def bad(reason: str) -> InputError:
        return InputError(f"{option} {url!r}: {reason}")  # repr: a control character shows as \\x..

    if url != url.strip() or any(c.isspace() or not c.isprintable() for c in url):
        raise bad("contains whitespace or control characters")
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise bad(f"not a valid URL ({exc})") from None
    if parts.scheme.lower() not in SCHEMES:
        raise bad(f"scheme must be http or https, got {parts.scheme or 'none'!r}")
    if parts.username is not None or parts.password is not None:
        raise bad("credentials in the URL are not supported")
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise bad("a base URL takes no query or fragment")
    host = parts.hostname
    if not host:
        raise bad("no host")
    if not _valid_host(host, bracketed="[" in parts.netloc):
        raise bad(f"host {host!r} is not a valid host name or IP address")
    if port is not None and port == 0:
        raise bad("port must be within 1..65535")
    if parts.netloc.endswith(":"):
        raise bad("empty port after ':'")
    return (parts.scheme.lower() + url[len(parts.scheme) :]).rstrip("/")


def _valid_host(host: str, *, bracketed: bool) -> bool:
    if bracketed:
        try:
            return ipaddress.ip_address(host.split("%", 1)[0]).version == 6
        except ValueError:
            return False
    try:
        ipaddress.IPv4Address(host)
        return True
    except ValueError:
        pass
    if host.replace(".", "").isdigit():
        return False  # 999.1.1.1 is no name
    labels = host.rstrip(".").split(".")
    return len(host) <= 253 and all(_LABEL.match(label) for label in labels)
