"""Every model type the installed SGLang serves, as a ``config.json`` built from its own config class's defaults.

``drift --all-architectures`` holds the rule model to SGLang beyond the bundled fixtures. The set is SGLang's:

- the architectures are ``sglang.srt.models.registry.ModelRegistry`` (every ``EntryClass`` of
  ``sglang.srt.models``, as a server loads them; a module that fails to import there is absent here too);
- the model types are SGLang's own config registry (``sglang.srt.utils.hf_transformers.common._CONFIG_REGISTRY``)
  and every transformers model type whose causal-LM architecture (``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``) the
  registry serves. A type of SGLang's own registry gets the registry architecture whose module uses that very
  config class.

Each config class is built with no arguments (its defaults), written as ``config.json`` with its ``model_type``
and the one architecture; nothing is shrunk (the geometry is the class's). A type is skipped, with a counted
reason, when no architecture of the registry serves it or when its class does not construct or serialize.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvdoctor._exceptions import InputError
from kvdoctor.engines.sglang import _runtime

NO_ARCHITECTURE = "no causal-LM architecture SGLang serves"
NO_CONSTRUCT = "config class does not construct with its defaults"
NO_SERIALIZE = "config does not serialize to JSON"


@dataclass(frozen=True)
class Candidate:
    """One model type: its config class and the architecture SGLang serves it with (None: none)."""

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
    """What :func:`generate` made of the registry."""

    registry_architectures: int
    model_types: int  # candidates considered (SGLang's config registry + causal-LM types SGLang serves)
    generated: list[Generated] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # model type -> reason

    @property
    def skipped_by_reason(self) -> dict[str, int]:
        return dict(sorted(Counter(self.skipped.values()).items()))


def _first(names: Any) -> str | None:
    if isinstance(names, str):
        return names
    if isinstance(names, (list, tuple)) and names:
        return str(names[0])
    return None


def _registry() -> dict[str, Any]:
    registry = _runtime.import_sglang("sglang.srt.models.registry").ModelRegistry
    with _runtime.quiet():  # its imports log a warning per model module that fails here
        if not getattr(registry, "_default_models_loaded", True) and hasattr(registry, "_load_default_models"):
            registry._load_default_models()
        return dict(registry.models)


def candidates() -> tuple[int, list[Candidate]]:
    """(how many architectures the registry serves, every candidate model type sorted by name)."""
    models = _registry()
    common = _runtime.import_sglang("sglang.srt.utils.hf_transformers.common")
    from transformers import PretrainedConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    own: dict[str, Any] = dict(common._CONFIG_REGISTRY)
    using: dict[int, list[str]] = {}  # id(config class) -> the architectures whose module uses it
    for arch in models:
        module = sys.modules.get(getattr(models[arch], "__module__", ""))
        for value in vars(module).values() if module is not None else ():
            if isinstance(value, type) and issubclass(value, PretrainedConfig):
                using.setdefault(id(value), []).append(arch)

    def served_by(cls: Any) -> str | None:
        """The architecture for CLS: one from the model module named as the config's module, then a
        causal LM, then by name (a module also imports configs it only reads: those rank last)."""
        stem = str(getattr(cls, "__module__", "")).rsplit(".", 1)[-1]

        def rank(arch: str) -> tuple[bool, bool, str]:
            own_module = str(models[arch].__module__).rsplit(".", 1)[-1] == stem
            return (not own_module, not arch.endswith("ForCausalLM"), arch)

        archs = using.get(id(cls), [])
        return min(archs, key=rank) if archs else None

    found: dict[str, Candidate] = {}
    for model_type, cls in own.items():
        found[model_type] = Candidate(model_type, cls, served_by(cls))
    for model_type, names in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items():
        arch = _first(names)
        if arch not in models or model_type in found or model_type not in CONFIG_MAPPING_NAMES:
            continue
        try:
            cls = CONFIG_MAPPING[model_type]
        except Exception:  # transformers lists it but cannot import its config here: not constructible
            cls = None
        found[model_type] = Candidate(model_type, cls, arch)
    return len(models), [found[k] for k in sorted(found)]


def config_dict(candidate: Candidate) -> dict[str, Any]:
    """CANDIDATE's config class built with its defaults, as ``config.json`` holds it (raises when it cannot)."""
    if candidate.config_class is None:
        raise TypeError("transformers has no config class for it here")
    config = candidate.config_class()
    data = config.to_dict()
    data["model_type"] = candidate.model_type
    data["architectures"] = [candidate.architecture]
    return data


def generate(root: Path, only: Sequence[str] = (), found: Iterable[Candidate] | None = None) -> GeneratedSet:
    """Write ``ROOT/<model_type>/config.json`` for every candidate (or those named in ONLY) that constructs."""
    if found is None:
        archs, listed = candidates()
    else:
        listed, archs = list(found), 0
    known = {c.model_type for c in listed}
    unknown = [name for name in only if name not in known]
    if unknown:
        from kvdoctor.core.model_types import suggestion

        raise InputError(
            f"--model-type {unknown[0]!r} is not a model type SGLang's config loader registers"
            f"{suggestion(unknown[0], known)} (repeat --model-type for several)"
        )
    chosen = [c for c in listed if not only or c.model_type in only]
    out = GeneratedSet(registry_architectures=archs, model_types=len(chosen))
    for candidate in chosen:
        if candidate.architecture is None:
            out.skipped[candidate.model_type] = NO_ARCHITECTURE
            continue
        try:
            with _runtime.quiet():
                data = config_dict(candidate)
        except Exception:  # a class that needs arguments, a sub-config that refuses: counted, not fatal
            out.skipped[candidate.model_type] = NO_CONSTRUCT
            continue
        try:
            text = json.dumps(data, indent=2, allow_nan=False, default=_refuse)
        except (TypeError, ValueError):
            out.skipped[candidate.model_type] = NO_SERIALIZE
            continue
        directory = root / _safe_name(candidate.model_type)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.json").write_text(text + "\n")
        out.generated.append(Generated(candidate.model_type, candidate.architecture, directory))
    return out


def _refuse(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON")


def _safe_name(model_type: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in model_type) or "_"
