"""One exception hierarchy, so the CLI can map every failure to one line and one exit code.

Modelled on httpx: callers catch the broad class they care about (``KvdoctorError``) or one precise
subclass, and each class carries the exit code its family of failures owes a CI system.
"""

from __future__ import annotations


class KvdoctorError(Exception):
    """Base class of every error kvdoctor raises on purpose."""

    exit_code: int = 2


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


def one_line(exc: KvdoctorError) -> str:
    """The single stderr line every command prints for a KvdoctorError."""
    return f"kvdoctor: {type(exc).__name__}: {exc}"
