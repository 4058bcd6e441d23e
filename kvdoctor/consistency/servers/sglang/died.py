"""A SGLang server that died during a consistency run: its own error line and the retraction count, in the message.

A loud bug kills a server (sglang#33385: the decode scheduler raises ``NotImplementedError`` at its first retraction
backup; ``--inject retract-raise`` replays it). The run stops with exit 3 the moment the supervisor sees a process
gone, or a request fails (``kvdoctor.deploy.supervisor.Supervisor.check_alive``, ``RequestFailed``); its message then
names the process and the tail of its log. What a reader needs first is the exception the server itself raised
(SGLang logs the scheduler's traceback: ``Scheduler hit an exception``, ``srt/managers/scheduler.py``), and how far the
retraction path got before it: here the message leads with both. Never a score: a dead server's run is exit 3.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from kvdoctor._exceptions import EXIT_DEPLOYMENT
from kvdoctor.consistency.result import ConsistencyResult
from kvdoctor.deploy.metrics import from_log
from kvdoctor.engines import hook_log

__all__ = ["error_line", "explained"]

# The last line of a Python traceback: an exception's (dotted) class name, then its message.
_ERROR = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)(?::\s.*)?$")
ORDER = ("decode-pressured", "prefill", "decode-reference", "pressured", "reference")  # who to blame first


def error_line(log_path: Path) -> str | None:
    """The last exception line in LOG_PATH (None: no traceback ended there, or no log)."""
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return next((ln.strip() for ln in reversed(lines) if _ERROR.match(ln.strip())), None)


def _blamed(result: ConsistencyResult) -> tuple[str, str] | None:
    """(role, its error line): the role the message names first, then the servers in ORDER, then any other."""
    named = [role for role in result.logs if result.message.startswith(f"{role} ")]
    roles = [*named, *(r for r in ORDER if r in result.logs), *result.logs]
    for role in dict.fromkeys(roles):
        line = error_line(Path(result.logs[role]))
        if line:
            return role, line
    return None


def explained(result: ConsistencyResult, hook_log_path: Path) -> ConsistencyResult:
    """RESULT (exit 3) with a message that leads with the dead server's own error line and the retractions it had
    begun (kvdoctor's site hook: retraction backups that reached the fault) and logged (SGLang's ``Retract
    requests`` lines, which come after a retraction's backups); unchanged when no server log ends in an error."""
    if result.exit_code != EXIT_DEPLOYMENT or not result.logs:
        return result
    blamed = _blamed(result)
    if blamed is None:
        return result
    role, line = blamed
    try:
        logged: int | None = from_log(Path(result.logs[role]).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        logged = None
    counted = f"{logged if logged is not None else '?'} retraction(s) logged by SGLang"
    if result.fault is not None:  # a retraction fault's wrapper logs each backup before SGLang's own code runs
        begun = hook_log.read(hook_log_path).count("fault-offload")
        counted = f"{begun} retraction backup(s) begun (kvdoctor's site hook), {counted}"
    head = f"{role} died: {line} ({counted}; log: {result.logs[role]})"
    return replace(result, message=f"{head}\n{result.message}")
