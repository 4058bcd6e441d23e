"""``kvdoctor --version``: kvdoctor's version, and each inference server this environment holds.

A server is found through its installed distribution's metadata (``importlib.metadata``), never by
importing it: SGLang and vLLM take seconds to import and may not import here at all, and ``--version``
must stay fast. Each line says which version kvdoctor's rules restate, so a reader sees at once whether
``--engine`` answers for the rules' revision or for another one.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvdoctor import __version__
from kvdoctor.core import servers
from kvdoctor.core.servers import ServerFacts
from kvdoctor.engines import Engine, load


@dataclass(frozen=True)
class ServerLine:
    """One server kvdoctor drives: its distribution name, how a sentence names it, the rules' version."""

    package: str
    title: str
    rules_version: str
    supported: str | None = None  # the versions --engine drives, when it is a range


def _servers() -> tuple[ServerLine, ...]:
    """Every server the seam knows (``kvdoctor.core.servers``), in its order, from its facts alone."""
    return tuple(_line(servers.facts(s)) for s in servers.servers())


def _line(facts: ServerFacts) -> ServerLine:
    """FACTS' line; the range its engine drives is its adapter's ``supported`` (``kvdoctor.engines``): None, the
    version its rules restate, for an engine without a range (or a server without an engine)."""
    engine = next((e for e in Engine if e.value == facts.name), None)
    drives = load(engine).supported if engine is not None else None
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
    own = installed_version("kvdoctor") or __version__
    return [f"kvdoctor {own}", *(server_line(s, installed_version(s.package)) for s in _servers())]
