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
reason, when no architecture of the registry serves it, when its class does not construct or serialize, or when
SGLang itself fails loading the class's defaults on a value no checkpoint has (a ``None`` where every real config
holds a number: a ``TypeError`` or ``AttributeError``, or an error raised outside SGLang's own code, by the config
class or transformers). Such a config is no evidence either way, so it is not drift; a deliberate SGLang refusal
(its own check, raising with a message) still is, and the rule model states it as a start-up refusal.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from kvdoctor._exceptions import EngineRefuses
from kvdoctor.engines import generated_set
from kvdoctor.engines.generated_set import Candidate, Generated, GeneratedSet
from kvdoctor.engines.generated_set import first_name as _first
from kvdoctor.engines.sglang import _runtime
from kvdoctor.text import shown

NO_ARCHITECTURE = "no causal-LM architecture SGLang serves"
NO_CONSTRUCT = "config class does not construct with its defaults"
NO_SERIALIZE = "config does not serialize to JSON"
DEFAULTS_FAIL = "SGLang fails on its config class's defaults"  # + ": <exception, one line>"
# Python's errors on a value (None iterated, an attribute of None): a crash, never a check SGLang wrote.
CRASH_TYPES: tuple[type[BaseException], ...] = (TypeError, AttributeError, KeyError, IndexError)
Probe = Callable[[Path], "str | None"]


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


def _crash(exc: BaseException) -> bool:
    """EXC is SGLang failing on a value, not refusing: a Python value error, or raised outside ``sglang``."""
    if isinstance(exc, CRASH_TYPES):
        return True
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return not str(tb.tb_frame.f_globals.get("__name__", "")).startswith("sglang")


def defaults_failure(directory: Path) -> str | None:
    """Why SGLang cannot load DIRECTORY's config (the class's defaults) with no flags, when it fails on a value
    rather than refusing (:func:`_crash`): the skip reason; None when it loads or refuses deliberately."""
    try:
        runtime = _runtime.resolve(str(directory), [])
    except EngineRefuses as exc:
        cause = exc.__cause__ or exc.__context__
        if cause is None or not _crash(cause):
            return None
        text = " ".join(str(cause).split()).split(". ")[0]  # its first sentence, on one line
        line = f"{type(cause).__name__}: {text}" if text else type(cause).__name__
        return f"{DEFAULTS_FAIL}: {shown(line, 160)}"
    runtime.close()
    return None


def generate(
    root: Path,
    only: Sequence[str] = (),
    found: Iterable[Candidate] | None = None,
    probe: Probe | None = None,
) -> GeneratedSet:
    """Write ``ROOT/<model_type>/config.json`` for every candidate (or those named in ONLY) that constructs and
    that SGLang does not fail on (PROBE, :func:`defaults_failure` for the installed registry: FOUND unset)."""
    if found is None:
        archs, listed = candidates()
        probe = probe or defaults_failure
    else:
        listed, archs = list(found), 0
    picked = generated_set.chosen(listed, only, "SGLang's config loader registers")
    out = GeneratedSet(registry_architectures=archs, model_types=len(picked))
    for candidate in picked:
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
        failed = probe(directory) if probe is not None else None
        if failed is not None:
            (directory / "config.json").unlink()  # nothing left of a skipped type: only what was written here
            with contextlib.suppress(OSError):
                directory.rmdir()  # and its folder, when nothing else is in it
            out.skipped[candidate.model_type] = failed
            continue
        out.generated.append(Generated(candidate.model_type, candidate.architecture, directory))
    return out


def _refuse(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON")


def _safe_name(model_type: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in model_type) or "_"
