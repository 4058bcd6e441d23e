"""The one line format kvdoctor's in-server code (SGLang's site hook, vLLM's plugin) reports through.

Each event is one line, ``PID EVENT DETAIL``, appended in one write to the file an environment variable names
(kvdoctor reads it back after the run: which fault installed, how often it fired). No variable, no file; a file
that cannot be written never disturbs the server. Imports nothing of either server.
"""

from __future__ import annotations

import os

__all__ = ["append"]


def append(env_var: str, event: str, detail: str = "") -> None:
    """Append ``PID EVENT DETAIL`` to the file ENV_VAR names (nothing when unset or unwritable)."""
    path = os.environ.get(env_var)
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()} {event} {detail}".rstrip() + "\n")
    except OSError:
        pass
