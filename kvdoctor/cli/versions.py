"""``kvdoctor --version``: kvdoctor's version, and each inference server this environment holds.

A server is found through its installed distribution's metadata (``importlib.metadata``), never by
importing it: SGLang and vLLM take seconds to import and may not import here at all, and ``--version``
must stay fast. Each line says which version kvdoctor's rules restate, so a reader sees at once whether
``--engine`` answers for the rules' revision or for another one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvdoctor.core.servers import ServerFacts


@dataclass(frozen=True)
class ServerLine:
    """One server kvdoctor drives: its distribution name, how a sentence names it, the rules' version."""

    package: str
    title: str
    rules_version: str
    supported: str | None = None  # the versions --engine drives, when it is a range


# One line per server whose ``--engine`` drives a stated range of its versions: "module:attribute" of the
# (first, last) pair, both ends in. A server without a line is driven at the version its rules restate.
ENGINE_RANGES: dict[str, str] = {
    "sglang": "kvdoctor.engines.sglang._support:SUPPORTED",
}


def _servers() -> tuple[ServerLine, ...]:
    """Every server the seam knows (``kvdoctor.core.servers``), in its order, from its facts alone."""
    from kvdoctor.core import servers

    return tuple(_line(servers.facts(s)) for s in servers.servers())


def _line(facts: ServerFacts) -> ServerLine:
    from kvdoctor.core.servers import lookup

    drives = lookup(ENGINE_RANGES, facts.server, "engine range") if facts.name in ENGINE_RANGES else None
    supported = f"{drives[0]} to {drives[1]}" if drives else None
    return ServerLine(facts.package, facts.title, facts.rules_version, supported)


def installed_version(package: str) -> str | None:
    """PACKAGE's installed version from its metadata (None: not installed here); nothing is imported."""
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def server_line(server: ServerLine, version: str | None) -> str:
    """``SGLang 0.5.22 (differs from the rules' 0.5.23; --engine sglang drives 0.5.20 to 0.5.23)``."""
    if version is None:
        return f"{server.title}: not installed (kvdoctor's rules: {server.rules_version})"
    rules = server.rules_version
    same = "the rules' revision" if version == rules else f"differs from the rules' {rules}"
    drives = f"; --engine {server.package} drives {server.supported}" if server.supported else ""
    return f"{server.title} {version} ({same}{drives})"


def version_lines() -> list[str]:
    """What ``--version`` prints: kvdoctor's version first (the line scripts read), then one line per server."""
    from kvdoctor import __version__

    own = installed_version("kvdoctor") or __version__
    return [f"kvdoctor {own}", *(server_line(s, installed_version(s.package)) for s in _servers())]
