"""Load a model's ``config.json`` from wherever the user has it, and unwrap its text config.

Four places are accepted, in this order: a path to a JSON file, a directory holding
``config.json``, the name of a bundled fixture, and a Hub repo id already in the local Hugging Face
cache (looked up offline; kvdoctor never downloads weights or configs at run time).

Everything here is the user's input: a name the file system cannot take (too long, ``~nouser``), a
file too large or nested too deep to be a config, an integer too long to convert, and every field
``config_checks.py`` refuses are ``ConfigError`` (exit 2), each naming the file and the field.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import field
from importlib import resources
from pathlib import Path
from typing import Any

from kvdoctor._exceptions import ConfigError
from kvdoctor.core import config_checks
from kvdoctor.core.config_rules import derived_fields
from kvdoctor.core.record import record
from kvdoctor.text import shown

# SGLang's ``get_hf_text_config`` looks for the language model's config under these keys, in
# this priority (sglang/srt/utils/hf_transformers/common.py, 0.5.23).
TEXT_CONFIG_KEYS = ("thinker_config", "llm_config", "language_config", "text_config")


@record(frozen=True)
class ModelConfig:
    """A parsed ``config.json``: the top level as written, and the text config SGLang reads.

    ``derived`` holds the fields SGLang's config class computes when the file leaves them out (the
    layer count of a LongCat-Flash ``num_layers`` or a Nemotron-H ``layers_block_type``); ``get``
    reads them last.
    """

    source: str
    top: Mapping[str, Any]
    text: Mapping[str, Any] = field(repr=False)
    text_path: str = ""  # where the text config sits in the file ("text_config"), "" when it is the top
    derived: Mapping[str, Any] = field(default_factory=dict, repr=False)

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

    def where(self, key: str) -> str:
        """KEY as a path in the file, for error messages: ``text_config.head_dim`` or ``head_dim``."""
        return f"{self.text_path}.{key}" if self.text_path and key in self.text else key

    def get(self, key: str, default: Any = None) -> Any:
        """A text-config field, falling back to the top level (how HF configs are read), then to what
        SGLang's config class derives."""
        if key in self.text:
            return self.text[key]
        if key in self.top:
            return self.top[key]
        return self.derived.get(key, default)

    def own(self, key: str) -> Any:
        """KEY as the text config itself states it (None when absent or null), without the fallback."""
        return self.text.get(key)

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
        return config_checks.check_count(self.source, self.where(key), value, config_checks.bound_for(key))


def unwrap_text_config(top: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's config, as SGLang's ``get_hf_text_config`` picks it."""
    return _text_config(top)[0]


def _text_config(top: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """(the text config, its path in the file)."""
    thinker = top.get("thinker_config")
    if isinstance(thinker, Mapping):
        sub = thinker.get("text_config")
        return (sub, "thinker_config.text_config") if isinstance(sub, Mapping) else (thinker, "thinker_config")
    for key in TEXT_CONFIG_KEYS[1:]:
        sub = top.get(key)
        if isinstance(sub, Mapping):
            return sub, key
    return top, ""


def _fixtures_root() -> Any:
    """The ``fixtures`` package of *this* kvdoctor: the source tree's own when kvdoctor runs from a
    checkout (so a checkout never reads another checkout's installed fixtures), else the installed
    ``kvdoctor_fixtures``."""
    tree = Path(__file__).resolve().parents[2] / "fixtures"
    if (tree / "__init__.py").is_file() and (tree / "models").is_dir():
        return tree
    return resources.files("kvdoctor_fixtures")


def bundled_fixtures() -> dict[str, Path]:
    """Fixture name → path, for every ``fixtures/models/*.json`` shipped with kvdoctor."""
    root = _fixtures_root() / "models"
    return {Path(entry.name).stem: Path(str(entry)) for entry in root.iterdir() if entry.name.endswith(".json")}


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


# What a path that exists but is neither a regular file nor a directory is, in words.
_FILE_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _file_kind(mode: int) -> str:
    return next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")


def _not_a_config(shown_path: str, mode: int) -> ConfigError:
    return ConfigError(f"{shown_path}: is {_file_kind(mode)}, not a config file or model directory")


def resolve_config_path(model: str) -> Path:
    """Where MODEL's ``config.json`` is; an InputError naming every place that was tried.

    Only ``stat`` is asked here: a path that exists but is a FIFO, a device or a socket is named as
    what it is (never opened: reading a FIFO without a writer would block).
    """
    try:
        path = Path(model).expanduser()
        if path.is_file():
            return path
        if path.is_dir():
            candidate = path / "config.json"
            if candidate.is_file():
                return candidate
            if candidate.exists():
                raise _not_a_config(shown(str(candidate)), candidate.stat().st_mode)
            raise ConfigError(f"{shown(model)}: directory has no config.json")
        if path.exists():  # exists, yet neither a regular file nor a directory: /dev/zero, a FIFO
            raise _not_a_config(shown(model), path.stat().st_mode)
    except RuntimeError as exc:  # expanduser: "~nouser/x" names no home directory
        raise ConfigError(f"{shown(model)}: cannot expand the home directory ({exc})") from None
    except (OSError, ValueError) as exc:  # a name too long for the file system, a NUL byte
        raise ConfigError(f"{shown(model)}: not a usable path ({getattr(exc, 'strerror', None) or exc})") from None
    fixtures = bundled_fixtures()
    if model in fixtures:
        return fixtures[model]
    replay_model = _fixtures_root() / "replay" / f"{model}.json"
    if "/" not in model and replay_model.is_file():  # a model only ``kvdoctor replay`` needs (fixtures/README.md)
        return Path(str(replay_model))
    cached = _hf_cache_config(model)
    if cached is not None:
        return cached
    raise ConfigError(not_found(model, fixtures))


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # org/name, as the Hub spells repo ids


def _looks_like_hub_id(model: str) -> bool:
    """``org/name``: a repo id ``_hf_cache_config`` looked up (not a path such as ``./x`` or ``/x``)."""
    return _HUB_ID.fullmatch(model) is not None


def _did_you_mean(model: str, fixtures: Mapping[str, Path]) -> str:
    """The bundled fixture name closest to MODEL (or to a Hub id's name part), or ""."""
    import difflib

    word = model.rsplit("/", 1)[-1].strip().lower()
    if len(word) > 100:  # no fixture name is anywhere near that long
        return ""
    replay = _fixtures_root() / "replay"
    extra = [Path(e.name).stem for e in replay.iterdir() if e.name.endswith(".json")] if replay.is_dir() else []
    close = difflib.get_close_matches(word, sorted({*fixtures, *extra}), n=1, cutoff=0.6)
    return close[0] if close else ""


def not_found(model: str, fixtures: Mapping[str, Path]) -> str:
    """The one line for a MODEL that is no file, directory, fixture or cached Hub id: short (never the list of
    every fixture), with the nearest fixture name and what to do next.

    A Hub id is looked up offline only, so its line says how to put the config in the cache (``hf download``,
    on a machine with the network) or to give a model directory; a name gets where the fixtures are listed.
    """
    close = _did_you_mean(model, fixtures)
    if _looks_like_hub_id(model):
        fixture = f"; did you mean the fixture {close}?" if close else ""
        return (
            f"{shown(model)}: not a path, nor in the local HF cache (read offline): cache it with "
            f"`hf download {model} config.json`, or give a model directory{fixture}"
        )
    if "/" in model or model.startswith((".", "~")) or model.endswith(".json"):
        return f"{shown(model)}: no such file or directory"
    guess = f"; did you mean {close}?" if close else ""
    where = f"{len(fixtures)} bundled fixtures: ls {_fixtures_root() / 'models'}"
    return f"{shown(model)}: not a path, bundled fixture or cached Hub id (org/name){guess} ({where})"


def parse_config(text: str, source: str) -> ModelConfig:
    """Parse and validate config JSON text; every failure names the source."""
    try:
        top = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{source}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise ConfigError(f"{source}: JSON nested deeper than {config_checks.MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:  # an integer past Python's 4,300-digit conversion limit
        raise ConfigError(f"{source}: unreadable JSON value ({exc})") from None
    if not isinstance(top, dict):
        raise ConfigError(f"{source}: a config must be a JSON object, got {type(top).__name__}")
    if config_checks.json_depth(top) > config_checks.MAX_JSON_DEPTH:
        raise ConfigError(f"{source}: JSON nested deeper than {config_checks.MAX_JSON_DEPTH} levels")
    if not top.get("model_type"):
        raise ConfigError(f"{source}: field 'model_type' is missing")
    text, text_path = _text_config(top)
    model_type = str(text.get("model_type", top["model_type"]))
    config = ModelConfig(source, top, text, text_path, derived_fields(text, model_type))
    config_checks.validate_config(config)
    return config


def read_config_text(path: Path) -> str:
    """PATH's text, refusing a file larger than any config (a model's weights given by mistake)."""
    limit = config_checks.MAX_CONFIG_BYTES
    try:
        # O_NONBLOCK: should PATH have become a FIFO since it was resolved, opening it must not wait
        # for a writer; fstat then refuses anything but a regular file before a byte is read.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as fh:
            mode = os.fstat(fh.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise _not_a_config(shown(str(path)), mode)
            data = fh.read(limit + 1)
        if len(data) > limit:
            raise ConfigError(f"{path}: larger than {limit // 2**20} MiB, not a config.json")
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None


def load_config(model: str) -> ModelConfig:
    """Resolve MODEL and parse its config."""
    path = resolve_config_path(model)
    return parse_config(read_config_text(path), str(path))
