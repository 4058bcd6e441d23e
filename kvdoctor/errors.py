"""One exception hierarchy, so the CLI can map every failure to one line and one exit code.

Modelled on httpx: callers catch the broad class they care about (``KvdoctorError``) or one precise
subclass, and each class carries the exit code its family of failures owes a CI system:
0 green · 1 a gate failed · 2 bad input · 3 a deployment failed · 4 kvdoctor itself failed.
"""

from __future__ import annotations

from kvdoctor.text import printable, shown

MAX_LINE = 2000  # characters of one error line; an echoed 1 MB value must not flood a CI log


class KvdoctorError(Exception):
    """Base class of every error kvdoctor raises on purpose."""

    exit_code: int = 2
    label: str = "error"  # the word after "kvdoctor:" on the one stderr line


class InputError(KvdoctorError):
    """The user's input is wrong: a config, a flag, a file, an option. Exit code 2."""

    exit_code = 2


class ConfigError(InputError):
    """A model config cannot be read, or lacks a field kvdoctor needs."""


class UnknownModelError(InputError):
    """The model_type is not one SGLang knows; kvdoctor reports it instead of guessing."""


class FlagError(InputError):
    """Server flags that are malformed or contradict each other."""


class GateFailure(KvdoctorError):
    """A check ran to the end and its verdict is red (accuracy, guard, bitwise diff). Exit code 1."""

    exit_code = 1


class DeploymentError(KvdoctorError):
    """A server or router failed to start, died, or timed out. Exit code 3."""

    exit_code = 3


class InternalError(KvdoctorError):
    """kvdoctor itself failed: an exception no rule anticipated is a kvdoctor bug. Exit code 4.

    Bad input is caught where it enters (config loading, flag parsing, option checks) and raised as
    an ``InputError``; anything else that escapes a command is wrapped here, so a bug is never
    reported as the user's fault (exit 2) nor as a red verdict (exit 1).
    """

    exit_code = 4
    label = "internal error"

    @classmethod
    def wrap(cls, exc: BaseException) -> InternalError:
        what = shown(exc, 500)
        return cls(f"{type(exc).__name__}: {what} (a kvdoctor bug; rerun with KVDOCTOR_DEBUG=1 for the traceback)")


class EngineUnavailable(InputError):
    """``--engine X`` was asked for, but X cannot be imported here (names the import and the fix)."""


class EngineRefuses(InputError):
    """The installed server refuses the launch line or the model (its own message and file:line)."""


class NotRunnableHere(InputError):
    """The case is valid but cannot run on this device (the reason is measured, not assumed)."""


class EngineFinding(GateFailure):
    """The server's own code raised during a round trip: a finding about the server, exit 1."""


def one_line(exc: KvdoctorError) -> str:
    """The single stderr line every command prints for a KvdoctorError: ``kvdoctor: error: <message>``."""
    line = f"kvdoctor: {exc.label}: {printable(exc)}"
    return line if len(line) <= MAX_LINE else f"{line[: MAX_LINE - 1]}…"
