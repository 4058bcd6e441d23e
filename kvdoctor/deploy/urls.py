"""The base URLs of servers someone else runs (``--prefill-url/--decode-url/--router-url``), checked
before anything starts.

A URL carrying credentials is refused, and no message echoes its secret: ``masked`` shows
``user:***@host`` (a bare ``token@host`` as ``***@host``), and ``redact`` does the same inside a
text that may quote the URL (an HTTP error from httpx names the URL it requested).

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
        # repr: a control character shows as \\x..; masked: a password never reaches the terminal or a log
        return InputError(f"{option} {masked(url)!r}: {redact(reason, url)}")

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


def _userinfo(url: str) -> tuple[int, int] | None:
    """Where the ``user:password`` of URL's authority starts and ends (before its ``@``), or None.

    Read the way ``urllib.parse.urlsplit`` reads an authority (up to the first ``/``, ``?`` or ``#``,
    credentials up to its last ``@``), but without parsing, so a URL too malformed to split is masked too.
    """
    start = url.find("//")
    if start < 0:
        return None
    start += 2
    end = next((i for i in range(start, len(url)) if url[i] in "/?#"), len(url))
    at = url.rfind("@", start, end)
    return (start, at) if at >= 0 else None


def masked(url: str) -> str:
    """URL with its password (or a bare token before ``@``) shown as ``***``: safe to print."""
    span = _userinfo(url)
    if span is None:
        return url
    start, at = span
    user, colon, _secret = url[start:at].partition(":")
    shown_info = f"{user}:***" if colon else "***"
    return f"{url[:start]}{shown_info}{url[at:]}"


def redact(text: str, url: str) -> str:
    """TEXT with URL's credentials masked wherever they appear (raw or percent-decoded)."""
    span = _userinfo(url)
    if span is None:
        return text
    start, at = span
    info = url[start:at]
    for form in {info, urllib.parse.unquote(info)}:
        if form:
            user, colon, _secret = form.partition(":")
            text = text.replace(f"{form}@", f"{user}:***@" if colon else "***@")
    return text
