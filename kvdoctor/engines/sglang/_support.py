"""Which SGLang versions ``--engine sglang`` drives, and the probes that adapt it to the installed one.

kvdoctor's rule model restates one SGLang (``RULES_SGLANG_VERSION``); the adapter drives a stated range
of them (:data:`SUPPORTED`) by *probing* the installed SGLang for every function and fact it uses, never
by assuming a version's shape. A piece one version lacks is :class:`Missing` where it is looked up; the
command that asked decides what that means: ``inspect`` shows the field it feeds as "not available in
SGLang X" and answers the rest, a command that cannot run without it exits 2 with one line naming the
version, the piece and the range. Outside the range, or when SGLang's own import fails, exit 2 the same
way (:func:`unsupported`). ``docs/sglang-versions.md`` is the per-version table of what differs.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvdoctor._exceptions import EngineUnavailable
from kvdoctor.core.sglang.server import RULES_VERSION as RULES_SGLANG_VERSION  # what the rules restate

SUPPORTED: tuple[str, str] = ("0.5.20", "0.5.23")  # the range the adapter is measured to drive, both ends in


def _key(version: str) -> tuple[int, ...]:
    """``0.5.22`` -> (0, 5, 22); a suffix (``0.5.23.post1``, ``0.5.23rc1``) does not move a version out of range."""
    return tuple(int(n) for n in re.findall(r"\d+", version)[:3])


def supported_range() -> str:
    """The supported range as a sentence names it."""
    return f"SGLang {SUPPORTED[0]} to {SUPPORTED[1]}"


def in_range(version: str) -> bool:
    return _key(SUPPORTED[0]) <= _key(version) <= _key(SUPPORTED[1])


def unsupported(version: str, why: str) -> EngineUnavailable:
    """Exit 2, one line: the installed VERSION cannot be driven because of WHY (the missing piece), and the range."""
    where = "outside" if not in_range(version) else "inside"
    return EngineUnavailable(
        f"--engine sglang: SGLang {version} cannot be driven: {why} "
        f"(it is {where} the supported range, {supported_range()}; kvdoctor's rules restate {RULES_SGLANG_VERSION})"
    )


def check_version(version: str) -> None:
    """Refuse (exit 2) an installed SGLang outside :data:`SUPPORTED` before any of it is imported."""
    if not in_range(version):
        raise unsupported(version, "its version is not one the adapter is measured against")


def differs_note(version: str) -> str | None:
    """A sentence when the installed SGLang is not the version kvdoctor's rules restate."""
    if version == RULES_SGLANG_VERSION:
        return None
    from kvdoctor.core.sglang.rules import RULES_REVISION

    return f"installed SGLang {version} differs from the rules revision ({RULES_REVISION})"


class Missing(LookupError):
    """A function, class or fact the adapter uses is not in the installed SGLang (``piece``: its dotted name)."""

    def __init__(self, piece: str, version: str) -> None:
        super().__init__(f"{piece} is not in SGLang {version}")
        self.piece = piece
        self.version = version

    @property
    def not_available(self) -> str:
        """How a field it feeds is shown: "not available in SGLang X (piece)"."""
        return f"not available in SGLang {self.version} ({self.piece})"


def piece(module: Any, name: str, version: str) -> Any:
    """MODULE's attribute NAME, or :class:`Missing` naming ``module.name`` when this SGLang has none."""
    try:
        return getattr(module, name)
    except AttributeError:
        raise Missing(f"{module.__name__}.{name}", version) from None


def known_platform_facts(ctx: Any) -> frozenset[str] | None:
    """The platform facts ``runtime_context.override_platform`` accepts in this SGLang (None: not listed)."""
    probes = getattr(ctx, "_PLATFORM_PROBES", None)
    values = getattr(ctx, "_PLATFORM_VALUES", None)
    if not isinstance(probes, dict) or not isinstance(values, dict):
        return None
    return frozenset(probes) | frozenset(values)


def fitted_facts(facts: dict[str, Any], known: frozenset[str] | None) -> tuple[dict[str, Any], list[str]]:
    """FACTS this SGLang knows, and the names it does not (it never reads them, so they are not passed)."""
    if known is None:
        return dict(facts), []
    return {k: v for k, v in facts.items() if k in known}, sorted(set(facts) - known)


@dataclass(frozen=True)
class Lazy:
    """An offered argument built only when the version's signature names it (its type may not exist elsewhere)."""

    make: Callable[[], Any]


def fitted_call(fn: Any, version: str, /, **offered: Any) -> Any:
    """Call SGLang's FN with the keyword arguments its signature in this version names, out of OFFERED (what
    kvdoctor can supply; a :class:`Lazy` one is built when named); :class:`Missing` when FN requires one
    kvdoctor does not offer."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return fn(**{k: v.make() if isinstance(v, Lazy) else v for k, v in offered.items()})
    required = [
        n
        for n, p in params.items()
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        and n not in offered
        and n != "self"
    ]
    name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}"
    if required:
        raise Missing(f"{name} taking only arguments kvdoctor supplies (it requires {', '.join(required)})", version)
    return fn(**{k: v.make() if isinstance(v, Lazy) else v for k, v in offered.items() if k in params})


def first_piece(module: Any, names: tuple[str, ...], version: str) -> Any:
    """The first of NAMES MODULE has (one function under the names successive versions gave it); :class:`Missing`
    naming them all when it has none."""
    for name in names:
        found = getattr(module, name, None)
        if found is not None:
            return found
    raise Missing(" or ".join(f"{module.__name__}.{n}" for n in names), version)
