"""Load a model's ``config.json`` from wherever the user has it, and unwrap its text config.

Four places are accepted, in this order: a path to a JSON file, a directory holding
``config.json``, the name of a bundled fixture, and a Hub repo id already in the local Hugging Face
cache (looked up offline; kvdoctor never downloads weights or configs at run time).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from kvdoctor.errors import ConfigError

# SGLang's ``get_hf_text_config`` looks for the language model's config under these keys, in
# this priority (sglang/srt/utils/hf_transformers/common.py, 0.5.23).
TEXT_CONFIG_KEYS = ("thinker_config", "llm_config", "language_config", "text_config")


@dataclass(frozen=True)
class ModelConfig:
    """A parsed ``config.json``: the top level as written, and the text config SGLang reads."""

    source: str
    top: Mapping[str, Any]
    text: Mapping[str, Any] = field(repr=False)

    @property
    def model_type(self) -> str:
        return str(self.top["model_type"])

    @property
    def text_model_type(self) -> str:
        return str(self.text.get("model_type", self.model_type))

    @property
    def architectures(self) -> tuple[str, ...]:
        archs = self.top.get("architectures") or self.text.get("architectures") or []
        if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
            raise ConfigError(f"{self.source}: field 'architectures' must be a list of class names")
        return tuple(archs)

    @property
    def architecture(self) -> str:
        return self.architectures[0] if self.architectures else ""

    def get(self, key: str, default: Any = None) -> Any:
        """A text-config field, falling back to the top level (how HF configs are read)."""
        if key in self.text:
            return self.text[key]
        return self.top.get(key, default)

    def require(self, key: str) -> Any:
        """A text-config field kvdoctor cannot do without; its absence is the user's error."""
        value = self.get(key)
        if value is None:
            raise ConfigError(f"{self.source}: field '{key}' is missing (needed for the state spec)")
        return value

    def positive_int(self, key: str, default: int | None = None) -> int:
        """An integer field that must be > 0, named in the error when it is not."""
        value = self.get(key, default)
        if value is None:
            raise ConfigError(f"{self.source}: field '{key}' is missing (needed for the state spec)")
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(f"{self.source}: field '{key}' must be a positive integer, got {value!r}")
        return value


def unwrap_text_config(top: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's config, as SGLang's ``get_hf_text_config`` picks it."""
    thinker = top.get("thinker_config")
    if isinstance(thinker, Mapping):
        sub = thinker.get("text_config")
        return sub if isinstance(sub, Mapping) else thinker
    for key in TEXT_CONFIG_KEYS[1:]:
        sub = top.get(key)
        if isinstance(sub, Mapping):
            return sub
    return top


def bundled_fixtures() -> dict[str, Path]:
    """Fixture name → path, for every ``fixtures/models/*.json`` shipped with kvdoctor."""
    root = resources.files("kvdoctor_fixtures") / "models"
    return {
        Path(entry.name).stem: Path(str(entry))
        for entry in root.iterdir()
        if entry.name.endswith(".json")
    }


def _hf_cache_config(repo_id: str) -> Path | None:
    """``config.json`` of a Hub repo already in the local HF cache, or None (never downloads)."""
    if repo_id.count("/") != 1 or repo_id.startswith((".", "/")):
        return None
    from huggingface_hub import try_to_load_from_cache  # slow import; only for repo ids

    try:
        hit = try_to_load_from_cache(repo_id, "config.json")
    except ValueError:  # huggingface_hub's HFValidationError: not a valid repo id
        return None
    return Path(hit) if isinstance(hit, str) else None


def resolve_config_path(model: str) -> Path:
    """Where MODEL's ``config.json`` is; an InputError naming every place that was tried."""
    path = Path(model).expanduser()
    if path.is_file():
        return path
    if path.is_dir():
        candidate = path / "config.json"
        if candidate.is_file():
            return candidate
        raise ConfigError(f"{model}: directory has no config.json")
    fixtures = bundled_fixtures()
    if model in fixtures:
        return fixtures[model]
    cached = _hf_cache_config(model)
    if cached is not None:
        return cached
    raise ConfigError(
        f"{model}: no such file or directory, bundled fixture, or Hub repo in the local HF cache "
        f"(fixtures: {', '.join(sorted(fixtures))})"
    )


def parse_config(text: str, source: str) -> ModelConfig:
    """Parse config JSON text; every failure names the source."""
    try:
        top = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{source}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    if not isinstance(top, dict):
        raise ConfigError(f"{source}: a config must be a JSON object, got {type(top).__name__}")
    if not top.get("model_type"):
        raise ConfigError(f"{source}: field 'model_type' is missing")
    return ModelConfig(source=source, top=top, text=unwrap_text_config(top))


def load_config(model: str) -> ModelConfig:
    """Resolve MODEL and parse its config."""
    path = resolve_config_path(model)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    return parse_config(text, str(path))
