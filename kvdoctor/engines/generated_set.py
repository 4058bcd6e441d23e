"""What both servers' ``drift --all-architectures`` share (:mod:`kvdoctor.engines.sglang.architectures`,
:mod:`kvdoctor.engines.vllm.architectures`): the records of a registry's model types turned into configs, and the
quiet block their config classes and loaders run in. Server-free: each server's room imports its server."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvdoctor._exceptions import InputError
from kvdoctor.core.model_types import suggestion


@dataclass(frozen=True)
class Candidate:
    """One model type: its config class and the architecture the server serves it with (None: none)."""

    model_type: str
    config_class: Any
    architecture: str | None


@dataclass(frozen=True)
class Generated:
    """One written config: ``<directory>/config.json``."""

    model_type: str
    architecture: str
    directory: Path


@dataclass
class GeneratedSet:
    """What a server's ``generate`` made of its registry."""

    registry_architectures: int
    model_types: int  # candidates considered (the server's config registry + the causal-LM types it serves)
    generated: list[Generated] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # model type -> reason

    @property
    def skipped_by_reason(self) -> dict[str, int]:
        return dict(sorted(Counter(self.skipped.values()).items()))


def first_name(names: Any) -> str | None:
    """The first of a config's ``architectures`` (a string, a list or a tuple), else None."""
    if isinstance(names, str):
        return names
    if isinstance(names, (list, tuple)) and names:
        return str(names[0])
    return None


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """A server logs and warns at import and resolution time, config classes too; keep a command's output clean."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            logging.disable(previous)


def chosen(listed: Sequence[Candidate], only: Sequence[str], registry: str) -> list[Candidate]:
    """The candidates ``--model-type`` names (ONLY; all when empty), in LISTED's order; a name LISTED lacks is
    exit 2 naming the nearest types (REGISTRY says whose registry lacks it)."""
    known = {c.model_type for c in listed}
    unknown = [name for name in only if name not in known]
    if unknown:
        raise InputError(
            f"--model-type {unknown[0]!r} is not a model type {registry}{suggestion(unknown[0], known)} "
            "(repeat --model-type for several)"
        )
    return [c for c in listed if not only or c.model_type in only]
