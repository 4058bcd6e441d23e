"""Replace only what differs between two runs of the same command line; keep everything else verbatim.

Volatile here: timestamps, durations, the paths of this checkout, its scratch directory and the venv,
free ports picked at run time, pd-eval's run-directory names, kvdoctor's own version, the host name.
Each rule is one narrow pattern anchored on the text around the value (a key, a label, a unit); numbers
in general are never touched, so byte counts, token counts, tables and hazard codes stay exact.

A path is replaced by a placeholder of another length, and rich pads key/value lines and titles to the
terminal width: a line one of these rules changed loses its trailing spaces (only such a line).
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kvdoctor.deploy.ports import ephemeral_ports, port_pool

# An ISO 8601 instant: the JSON header's "timestamp", JUnit's timestamp="..." attribute.
TIMESTAMP = re.compile(r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?")
# pd-eval's run directory: run-<YYYYmmdd-HHMMSS>-<8 hex> (kvdoctor/deploy/rundir.py).
RUN_DIR = re.compile(r"\brun-\d{8}-\d{6}-[0-9a-f]{8}\b")
# JSON durations, by key (every duration key in kvdoctor/schemas): roundtrip's "elapsed_s", drift's "seconds"
# per cell, pd-eval's "wall_s" and "latency_s", consistency's "launch_s"/"build_s". Only a number is replaced.
JSON_SECONDS = re.compile(r'("(?:elapsed_s|wall_s|seconds|latency_s|launch_s|build_s)": )\d+(?:\.\d+)?(?:e-?\d+)?')
# JUnit's time="0.123" attribute on <testsuite>/<testcase>.
JUNIT_TIME = re.compile(r'\btime="\d+(?:\.\d+)?"')
# roundtrip's run facts "elapsed   2.56 s" and its verdict line "... equal (2.56 s)".
ELAPSED = re.compile(r"(\belapsed\s+)\d+(?:\.\d+)? s\b")
PAREN_SECONDS = re.compile(r"\(\d+(?:\.\d+)? s\)")
# drift's verdict line: "... 0 drifting, 35.3 s".
DRIFT_SECONDS = re.compile(r"(\b\d+ drifting, )\d+(?:\.\d+)? s\b")
# A free port (kvdoctor.deploy.ports: from its pool below the kernel's ephemeral range, or the kernel's port 0
# where the pool is empty) after a loopback host or a --*port flag, or as JSON "bootstrap_port"; any other port
# (the closed-port case's :9, consistency's fixed 30000..30005) is kept.
HOST_PORT = re.compile(r"(127\.0\.0\.1:)(\d{4,5})\b")
FLAG_PORT = re.compile(r"(--(?:[a-z]+-)*port[ =])(\d{4,5})\b")
JSON_PORT = re.compile(r'("(?:[a-z]+_)?port": )(\d{4,5})\b')
# pd-eval's --json keeps argv as a list: "--port",\n "45895" (the flag on the line before).
ARGV_PORT_FLAG = re.compile(r'^\s*"--(?:[a-z]+-)*port",$')
ARGV_PORT_VALUE = re.compile(r'^(\s*")(\d{4,5})(",?)$')


EPHEMERAL = ephemeral_ports()
FREE_POOL = port_pool()


@dataclass
class Normaliser:
    """One case's normaliser: free ports keep their identity (<port1>, <port2>) across its outputs."""

    paths: dict[str, str]  # absolute path -> placeholder
    version: str
    hostname: str = field(default_factory=socket.gethostname)
    ports: dict[str, str] = field(default_factory=dict)

    def __call__(self, text: str) -> str:
        lines, previous = [], ""
        for line in text.split("\n"):
            new = self._line(line, previous)
            lines.append(new.rstrip() if new != line else line)
            previous = line
        return "\n".join(lines)

    def _line(self, line: str, previous: str) -> str:
        for path in sorted(self.paths, key=len, reverse=True):  # the scratch dir may sit inside the checkout
            line = line.replace(path, self.paths[path])
        line = TIMESTAMP.sub("<timestamp>", line)
        line = RUN_DIR.sub("run-<time>-<id>", line)
        line = JSON_SECONDS.sub(r"\1<seconds>", line)
        line = JUNIT_TIME.sub('time="<seconds>"', line)
        line = ELAPSED.sub(r"\1<seconds> s", line)
        line = PAREN_SECONDS.sub("(<seconds> s)", line)
        line = DRIFT_SECONDS.sub(r"\1<seconds> s", line)
        for pattern in (HOST_PORT, FLAG_PORT, JSON_PORT):
            line = pattern.sub(self._port, line)
        if ARGV_PORT_FLAG.match(previous):
            line = ARGV_PORT_VALUE.sub(self._port, line)
        line = self._version(line, previous)
        if len(self.hostname) >= 4:  # a name as short as "ci" could be part of any word
            line = re.sub(rf"\b{re.escape(self.hostname)}\b", "<hostname>", line)
        return line

    def _port(self, match: re.Match[str]) -> str:
        port = match.group(2)
        if int(port) not in EPHEMERAL and int(port) not in FREE_POOL:
            return match.group(0)
        name = self.ports.setdefault(port, f"<port{len(self.ports) + 1}>")
        return match.group(0).replace(port, name, 1)

    def _version(self, line: str, previous: str) -> str:
        """kvdoctor's version: the JSON header, its engine block when kvdoctor answered, and "kvdoctor X.Y.Z"."""
        v = re.escape(self.version)
        line = re.sub(rf'("kvdoctor_version": "){v}"', r'\1<version>"', line)
        if previous.strip() == '"name": "kvdoctor",':
            line = re.sub(rf'^(\s*"version": "){v}"', r'\1<version>"', line)
        return re.sub(rf"\bkvdoctor {v}\b", "kvdoctor <version>", line)


def path_placeholders(scratch: Path, repo: Path, fixtures: Iterable[Path], prefix: Path | None) -> dict[str, str]:
    """Each volatile directory (and its resolved form) -> its placeholder."""
    named: list[tuple[Path, str]] = [(scratch, "<scratch>"), (repo, "<repo>")]
    # The bundled fixtures: fixtures/ in this checkout, and kvdoctor_fixtures wherever it is installed
    # (an editable install may point at another checkout); both are "the bundled fixtures".
    named += [(path, "<fixtures>") for path in fixtures]
    if prefix is not None:  # a virtual environment (.venv-sglang/): where SGLang and torch are installed
        named.append((prefix, "<venv>"))
    out: dict[str, str] = {}
    for path, placeholder in named:
        for form in {str(path), str(path.resolve())}:
            out.setdefault(form, placeholder)
    return out
