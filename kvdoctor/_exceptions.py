"""The whole error tree in one module, so the CLI can map every failure to one line and one exit code.

Modelled on httpx's ``_exceptions.py``: callers catch the broad class they care about
(``KvdoctorError``) or one precise subclass, and each class carries the exit code its family of
failures owes a CI system: 0 green · 1 a gate failed · 2 bad input · 3 a deployment failed ·
4 kvdoctor itself failed. Public names are re-exported from ``kvdoctor`` (its ``__all__``).
Two classes here are not ``KvdoctorError``: ``Interrupted`` (a signal, unwinding like
``KeyboardInterrupt``) and the internal signal ``MalformedReply``, which its callers turn into a
verdict and which never reaches the CLI. This module imports nothing of kvdoctor's rule models
(``core``): the error tree sits below every floor.
"""

from __future__ import annotations

import signal

from kvdoctor.text import printable, shown

MAX_LINE = 2000  # characters of one error line; an echoed 1 MB value must not flood a CI log

# --- every exit code kvdoctor returns, defined here once (the README's "Exit codes" table) ---
# A verdict's codes (0, 1), each error family's (on the classes below: 2, 3, 4), and a signal's: 128 + N,
# what a shell reports for a process signal N stopped. Every other module imports these names.

EXIT_PASS = 0  # everything checked is green (verdict pass, or warn: findings reported, not gated)
EXIT_GATE = 1  # a check ran to the end and is red (verdict fail)
EXIT_INPUT = 2  # bad input
EXIT_DEPLOYMENT = 3  # a deployment failed
EXIT_INTERNAL = 4  # kvdoctor itself failed
SIGNAL_EXIT_BASE = 128
EXIT_SIGINT = SIGNAL_EXIT_BASE + signal.SIGINT  # 130: Ctrl-C
EXIT_SIGPIPE = SIGNAL_EXIT_BASE + signal.SIGPIPE  # 141: the reader of standard output went away
EXIT_SIGTERM = SIGNAL_EXIT_BASE + signal.SIGTERM  # 143: SIGTERM

EXIT_CODES: dict[int, str] = {
    EXIT_PASS: "everything checked is green",
    EXIT_GATE: "a gate failed",
    EXIT_INPUT: "bad input",
    EXIT_DEPLOYMENT: "a deployment failed",
    EXIT_INTERNAL: "kvdoctor itself failed (a bug)",
    EXIT_SIGINT: "Ctrl-C (SIGINT)",
    EXIT_SIGPIPE: "the reader of standard output went away",
    EXIT_SIGTERM: "SIGTERM",
}


class KvdoctorError(Exception):
    """Base class of every error kvdoctor raises on purpose."""

    exit_code: int = EXIT_INPUT
    label: str = "error"  # the word after "kvdoctor:" on the one stderr line


class InputError(KvdoctorError):
    """The user's input is wrong: a config, a flag, a file, an option. Exit code 2."""

    exit_code = EXIT_INPUT


class ConfigError(InputError):
    """A model config cannot be read, or lacks a field kvdoctor needs."""


class UnknownModelError(InputError):
    """The model_type is not one SGLang knows; kvdoctor reports it instead of guessing."""


class FlagError(InputError):
    """Server flags that are malformed or contradict each other."""


class GateFailure(KvdoctorError):
    """A check ran to the end and its verdict is red (accuracy, guard, bitwise diff). Exit code 1."""

    exit_code = EXIT_GATE


class DeploymentError(KvdoctorError):
    """A server or router failed to start, died, or timed out. Exit code 3."""

    exit_code = EXIT_DEPLOYMENT


class InternalError(KvdoctorError):
    """kvdoctor itself failed: an exception no rule anticipated is a kvdoctor bug. Exit code 4.

    Bad input is caught where it enters (config loading, flag parsing, option checks) and raised as
    an ``InputError``; anything else that escapes a command is wrapped here, so a bug is never
    reported as the user's fault (exit 2) nor as a red verdict (exit 1).
    """

    exit_code = EXIT_INTERNAL
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


# --- input (exit 2) ---


class DownloadError(InputError):
    """The official copy could not be fetched (network), as opposed to fetched and wrong."""


# --- deployment (exit 3): pd-eval's servers, router and client ---


class ServerExited(DeploymentError):
    """A process the run started exited on its own."""

    reason = "server_exited"


class ServerUnhealthy(DeploymentError):
    """A server never answered its health check in time."""

    reason = "server_unhealthy"


class ForeignServer(ServerUnhealthy):
    """Something answered the health check, but not a process this run started."""

    reason = "foreign_server"


class RequestFailed(DeploymentError):
    """A request kept failing at the transport or 5xx level."""

    reason = "request_failed"


class EvalTimeout(DeploymentError):
    """The run's --timeout expired while the eval was running."""

    reason = "timeout"


# --- not KvdoctorError: a signal, and internal signals caught before the CLI ---


class Interrupted(BaseException):
    """SIGTERM or Ctrl-C: unwinds like KeyboardInterrupt so every ``with`` block tears down."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @staticmethod
    def word(signum: int) -> str:
        """What a run SIGNUM stopped says it was: ``interrupted`` (Ctrl-C), ``terminated`` (SIGTERM), or
        ``stopped by SIGHUP``; the stderr line, the JUnit error case and the step summary all use it."""
        if signum == signal.SIGINT:
            return "interrupted"
        if signum == signal.SIGTERM:
            return "terminated"
        return f"stopped by {signal.Signals(signum).name}"

    @staticmethod
    def exit_code_for(signum: int) -> int:
        """128 + SIGNUM, what a shell reports for a process that signal stopped (130, 143)."""
        return SIGNAL_EXIT_BASE + signum

    @staticmethod
    def signal_of(exit_code: int) -> int | None:
        """The signal an exit code says stopped the run (130: SIGINT), or None for any other code."""
        signum = exit_code - SIGNAL_EXIT_BASE
        return signum if signum in signal.valid_signals() else None


class MalformedReply(ValueError):
    """A 200 reply that is not the JSON shape SGLang answers with."""


def one_line(exc: KvdoctorError) -> str:
    """The single stderr line every command prints for a KvdoctorError: ``kvdoctor: error: <message>``."""
    line = f"kvdoctor: {exc.label}: {printable(exc)}"
    return line if len(line) <= MAX_LINE else f"{line[: MAX_LINE - 1]}…"
