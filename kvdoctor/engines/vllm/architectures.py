"""Every model type the installed vLLM serves, as a ``config.json`` built from its own config class's defaults.

``drift --server vllm --all-architectures`` holds the vLLM rule model to vLLM beyond the bundled fixtures, built
the way SGLang's is (:mod:`kvdoctor.engines.sglang.architectures`). The set is vLLM's:

- the architectures are ``vllm.model_executor.models.registry.ModelRegistry.get_supported_archs()``;
- the model types are vLLM's own config registry (``vllm.transformers_utils.config._CONFIG_REGISTRY``, whose class
  vLLM's ``get_config`` prefers) and every transformers model type whose causal-LM architecture
  (``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``) the registry serves; a type gets that causal-LM architecture.

Each config class is built with no arguments (its defaults), written as ``config.json`` with its ``model_type``
and the one architecture; nothing is shrunk. A type is skipped, with a counted reason, when no causal-LM
architecture vLLM serves maps to it, when its class does not construct or serialize, when vLLM's own ``get_config``
fails on the written defaults (no evidence either way), or when kvdoctor's vLLM rules do not model the
architecture's state (the rule model's refusal: what is missing).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from kvdoctor._exceptions import InputError, UnknownModelError
from kvdoctor.core.config import load_config
from kvdoctor.core.vllm.specs import classify
from kvdoctor.engines import generated_set
from kvdoctor.engines.generated_set import Candidate, Generated, GeneratedSet, quiet
from kvdoctor.engines.generated_set import first_name as _first
from kvdoctor.engines.vllm import _runtime as rt
from kvdoctor.text import shown

NO_ARCHITECTURE = "no causal-LM architecture vLLM serves"
NO_CONSTRUCT = "config class does not construct with its defaults"
NO_SERIALIZE = "config does not serialize to JSON"
DEFAULTS_FAIL = "vLLM's get_config fails on its config class's defaults"  # + ": <exception, one line>"
NOT_MODELLED = "kvdoctor's vLLM rules do not model its state"
Probe = Callable[[Path], "str | None"]


def candidates() -> tuple[int, list[Candidate]]:
    """(how many architectures vLLM's registry serves, every candidate model type sorted by name)."""
    archs = set(rt.load("vllm.model_executor.models.registry").ModelRegistry.get_supported_archs())
    own = rt.load("vllm.transformers_utils.config")._CONFIG_REGISTRY
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    found: dict[str, Candidate] = {}
    for model_type, names in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items():
        arch = _first(names)
        if arch not in archs or (model_type not in CONFIG_MAPPING_NAMES and model_type not in own):
            continue
        found[model_type] = Candidate(model_type, _config_class(model_type, own, CONFIG_MAPPING), arch)
    for model_type in own:
        if model_type not in found:
            found[model_type] = Candidate(model_type, None, None)
    return len(archs), [found[k] for k in sorted(found)]


def _config_class(model_type: str, own: Any, mapping: Any) -> Any:
    """The class vLLM's get_config builds MODEL_TYPE with: its own registry's first, else transformers'."""
    try:
        return own[model_type] if model_type in own else mapping[model_type]
    except Exception:  # listed, but its module does not import here: not constructible
        return None


def config_dict(candidate: Candidate) -> dict[str, Any]:
    """CANDIDATE's config class built with its defaults, as ``config.json`` holds it (raises when it cannot)."""
    if candidate.config_class is None:
        raise TypeError("no config class for it here")
    data = candidate.config_class().to_dict()
    data["model_type"] = candidate.model_type
    data["architectures"] = [candidate.architecture]
    return data


def defaults_failure(directory: Path) -> str | None:
    """Why vLLM's own ``get_config`` cannot build DIRECTORY's config (the class's defaults), or why kvdoctor's
    vLLM rules do not model it: the skip reason; None when both take it (a rule-model refusal of a field is
    compared, not skipped: vLLM may accept what kvdoctor refuses)."""
    hf = rt.load("vllm.transformers_utils.config")
    try:
        with quiet():
            hf.get_config(str(directory), trust_remote_code=False)
    except Exception as exc:  # the defaults are not a config vLLM loads: no evidence either way
        text = " ".join(str(exc).split()).split(". ")[0]
        line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        return f"{DEFAULTS_FAIL}: {shown(line, 160)}"

    try:
        classify(load_config(str(directory / "config.json")))
    except UnknownModelError:
        return NOT_MODELLED
    except InputError:
        return None
    return None


def generate(
    root: Path, only: Sequence[str] = (), found: Iterable[Candidate] | None = None, probe: Probe | None = None
) -> GeneratedSet:
    """Write ``ROOT/<model_type>/config.json`` for every candidate (or those named in ONLY) that constructs, that
    vLLM loads and kvdoctor's vLLM rules model (PROBE, :func:`defaults_failure` for the installed registry)."""
    if found is None:
        archs, listed = candidates()
        probe = probe or defaults_failure
    else:
        listed, archs = list(found), 0
    picked = generated_set.chosen(listed, only, "vLLM's registry serves")
    out = GeneratedSet(registry_architectures=archs, model_types=len(picked))
    for candidate in picked:
        if candidate.architecture is None:
            out.skipped[candidate.model_type] = NO_ARCHITECTURE
            continue
        try:
            with quiet():
                data = config_dict(candidate)
        except Exception:  # a class that needs arguments, a sub-config that refuses: counted, not fatal
            out.skipped[candidate.model_type] = NO_CONSTRUCT
            continue
        try:
            # Infinity as transformers' own to_json_string writes it (Mamba's time_step_limit (0.0, inf)): the
            # json module vLLM's config loader reads with takes it back.
            text = json.dumps(data, indent=2, default=_refuse)
        except (TypeError, ValueError):
            out.skipped[candidate.model_type] = NO_SERIALIZE
            continue
        directory = root / _safe_name(candidate.model_type)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.json").write_text(text + "\n")
        failed = probe(directory) if probe is not None else None
        if failed is not None:
            (directory / "config.json").unlink()
            with contextlib.suppress(OSError):
                directory.rmdir()
            out.skipped[candidate.model_type] = failed
            continue
        out.generated.append(Generated(candidate.model_type, candidate.architecture, directory))
    return out


def _refuse(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON")


def _safe_name(model_type: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in model_type) or "_"
