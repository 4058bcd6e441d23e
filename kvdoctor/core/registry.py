"""The one registry of hazard rules, for both servers: one :class:`Rule` record per hazard code.

A hazard is something a person can act on: a stable code (CI greps for it), a severity (``--strict``
fails on "error"), and a sentence that says what goes wrong and what to change. Each server's hazards
module registers its rules here once, with the checks that emit them (:func:`register`):
``core/sglang/hazards.py`` the KVD0xx codes over its ``Context``, ``core/vllm/hazards.py`` the KVD1xx codes
over ``VllmContext``. The registry imports neither (a server's rules are registered when its hazards
module is imported, which the server's analysis does), so no server's rules depend on the other's.
The hazard tables of docs/inspect.md are checked against :data:`RULES` (``tests/core/test_readme_hazards.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from enum import Enum
from typing import Any

from kvdoctor._exceptions import InternalError
from kvdoctor.core.cite import Cite
from kvdoctor.core.record import record


class Severity(str, Enum):
    """How bad a hazard is. A ``str``: it compares, hashes, formats and prints (JSON too) as its value."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


ERROR, WARNING, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO


@record(frozen=True)
class Hazard:
    """One finding: its severity, its code (``KVD001`` ...), what to do, and where the rule comes from."""

    severity: Severity
    code: str
    message: str
    where: str | None = None  # the server's file:lines the rule restates (KVD014 / KVD114: where it refuses)


@record(frozen=True)
class RefusalFacts:
    """A refusal the server itself would raise (SGLang at start-up, vLLM while planning its KV cache):
    its message and the server's file:lines raising it, as ``inspect`` reports it (``refusals``,
    ``refusal``) for either server."""

    message: str
    where: str


@record(frozen=True)
class Rule:
    """One hazard code of one server: the severities it is emitted with (the first is the usual one), ``doc``
    (the one line the hazard table of docs/inspect.md shows for it) and the server source it restates."""

    server: str
    code: str
    severities: tuple[Severity, ...]
    doc: str
    cites: tuple[Cite, ...] = ()

    def hazard(self, message: str, where: str | None = None, severity: Severity | None = None) -> Hazard:
        """This rule's hazard: SEVERITY must be one the rule is registered with (given when it has several)."""
        if severity is None and len(self.severities) > 1:
            raise InternalError(f"{self.code} has several severities: say which")
        chosen = self.severities[0] if severity is None else severity
        if chosen not in self.severities:
            raise InternalError(f"{self.code} is not registered with severity {chosen}")
        return Hazard(chosen, self.code, message, where)


Check = Callable[[Any], Iterator[Hazard]]

RULES: dict[str, Rule] = {}
_CHECKS: dict[str, tuple[Check, ...]] = {}


def register(server: str, rules: Iterable[Rule], checks: tuple[Check, ...]) -> None:
    """Register SERVER's rules (each code once, across both servers) and its checks, in the order they run."""
    if server in _CHECKS:
        raise InternalError(f"hazard rules of {server} registered twice")
    rules = tuple(rules)
    codes = [rule.code for rule in rules]
    for rule in rules:
        if rule.server != server or rule.code in RULES or codes.count(rule.code) > 1 or not rule.severities:
            raise InternalError(f"hazard rule {rule.code} of {rule.server}: registered twice, or without a severity")
    RULES.update((rule.code, rule) for rule in rules)
    _CHECKS[server] = checks


def rules_for(server: str) -> tuple[Rule, ...]:
    """SERVER's hazard rules, one record per code, in code order."""
    return tuple(sorted((r for r in RULES.values() if r.server == server), key=lambda r: r.code))


def checks_for(server: str) -> tuple[Check, ...]:
    """SERVER's checks in the order they run; a server whose hazards module was never imported is an error,
    never an empty list (which would report a clean launch from checks that did not run)."""
    try:
        return _CHECKS[server]
    except KeyError:
        raise InternalError(
            f"no hazard rules registered for {server!r} (import kvdoctor.core.{server}.hazards)"
        ) from None


def find_hazards(server: str, ctx: object) -> tuple[Hazard, ...]:
    """Every hazard SERVER's checks find in CTX, in check order."""
    return tuple(h for check in checks_for(server) for h in check(ctx))


def ungated(hazards: tuple[Hazard, ...], *, strict: bool) -> list[str]:
    """The findings reported but not gated, as the run header's ``warnings`` (either server's ``inspect``).

    Warning hazards never gate; error hazards gate only under ``--strict`` (without it they are
    reported, and the verdict is ``warn``, not ``pass``). Info hazards are notes, not warnings.
    """
    levels = {WARNING} if strict else {WARNING, ERROR}
    return [f"{h.code} ({h.severity}): {h.message}" for h in hazards if h.severity in levels]
