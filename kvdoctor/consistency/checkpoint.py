"""A seeded random checkpoint for a config's real parameter names, and an offline tokenizer, cached.

Why not ``--load-format dummy``: measured on SGLang 0.5.23, dummy weights gave a two-token cycle
(median 2 distinct tokens in 32), output that barely depends on its input and so cannot show lost
state. ``AutoModelForCausalLM.from_config`` with its initializer (std 0.02), seeded, in float32, gave
59 distinct tokens in 64. Every server of both deployments loads the same directory; the sha256 over
its safetensors files (the *weights digest*) goes into the report.

The directory is cached under ``<output-dir>/checkpoints/<config digest>-seed<seed>/`` and built in a
temporary sibling renamed into place when complete, so an interrupted build never leaves a
half-written checkpoint that a later run would trust. torch, transformers and tokenizers are imported
only here, only when a checkpoint must be built.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvdoctor._exceptions import InputError

DIGEST_FILE = "kvdoctor-checkpoint.json"
STD = 0.02
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")  # ids 0..3, as shrink.SPECIAL_IDS and workload.FIRST_ID


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    config_digest: str
    seed: int
    weights_digest: str
    cached: bool
    build_s: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "path": str(self.path),
            "config_digest": self.config_digest,
            "seed": self.seed,
            "weights_digest": self.weights_digest,
            "cached": self.cached,
            "build_s": round(self.build_s, 2),
            "init": f"transformers from_config, normal std {STD}, float32, torch.manual_seed({self.seed})",
        }


def config_digest(config: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def weights_digest(directory: Path) -> str:
    """sha256 over every ``*.safetensors`` file of DIRECTORY, in name order (names included)."""
    h = hashlib.sha256()
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise InputError(f"{directory}: no *.safetensors files to digest")
    for f in files:
        h.update(f.name.encode() + b"\0")
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def cache_dir(root: Path, config: Mapping[str, Any], seed: int) -> Path:
    return root / "checkpoints" / f"{config_digest(config)[:16]}-seed{seed}"


def ensure(config: Mapping[str, Any], seed: int, root: Path) -> Checkpoint:
    """The checkpoint for (CONFIG, SEED) under ROOT: reused when complete, else built."""
    import time

    target = cache_dir(root, config, seed)
    digest = config_digest(config)
    marker = target / DIGEST_FILE
    if marker.is_file():
        info = json.loads(marker.read_text(encoding="utf-8"))
        if info.get("config_digest") == digest and info.get("seed") == seed:
            return Checkpoint(target, digest, seed, str(info["weights_digest"]), cached=True)
    began = time.monotonic()
    tmp = target.with_name(f"{target.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        tmp.mkdir(parents=True)
        build(config, seed, tmp)
        wdigest = weights_digest(tmp)
        (tmp / DIGEST_FILE).write_text(
            json.dumps({"config_digest": digest, "seed": seed, "weights_digest": wdigest}, indent=2), encoding="utf-8"
        )
        if target.exists():  # an incomplete leftover (no marker): ours replaces it
            shutil.rmtree(target)
        os.replace(tmp, target)
    except OSError as exc:
        raise InputError(f"cannot write a checkpoint under {root}: {exc}") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return Checkpoint(target, digest, seed, wdigest, cached=False, build_s=time.monotonic() - began)


def build(config: Mapping[str, Any], seed: int, out: Path) -> None:
    """Write the model (safetensors, float32) and a WordLevel tokenizer to OUT, writing nothing to stderr: the
    output contract is kvdoctor's own lines (:func:`_quiet_transformers`)."""
    try:
        import torch
    except ImportError as exc:
        raise InputError(
            f"a random checkpoint needs torch and transformers ({exc}); run from .venv-server (make server-env)"
        ) from None
    with _quiet_transformers():
        hf_config = hf_config_of(config)
        hf_config.initializer_range = STD
        torch.manual_seed(seed)
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32)
        model.save_pretrained(out, safe_serialization=True)
    write_tokenizer(int(config["vocab_size"]), out)


def hf_config_of(config: Mapping[str, Any]) -> Any:
    """CONFIG as transformers' config object (``InputError`` naming the nearest model types for one it does not
    know). The dtype goes in as ``dtype``: transformers 5 warns on ``torch_dtype`` (``configuration_utils.py``)."""
    try:
        from transformers import AutoConfig
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    except ImportError as exc:
        raise InputError(
            f"a random checkpoint needs torch and transformers ({exc}); run from .venv-server (make server-env)"
        ) from None
    skip = ("model_type", "architectures", "transformers_version", "torch_dtype")
    fields = {k: v for k, v in config.items() if k not in skip}
    if "torch_dtype" in config and "dtype" not in config:
        fields["dtype"] = config["torch_dtype"]
    model_type = str(config.get("model_type"))
    if model_type not in CONFIG_MAPPING:
        raise InputError(
            f"transformers cannot build a config for model_type {model_type!r}: it knows no such model type"
            f"{nearest(model_type, CONFIG_MAPPING.keys())}"
        )
    try:
        return AutoConfig.for_model(model_type, **fields)
    except Exception as exc:  # transformers' validation raises its own error types (StrictDataclass...Error)
        why = f"{type(exc).__name__}: {_first_line(exc)}"
        raise InputError(f"transformers cannot build a config for model_type {model_type!r}: {why}") from None


def check_buildable(config: Mapping[str, Any], *, has_weights: bool = False) -> None:
    """Refuse (``InputError``, exit 2) a config the checkpoint build would fail on, before any work: its model is
    built on torch's meta device (no memory, no weights), so transformers' config validation and the model's
    constructor run as :func:`build` runs them. Skipped where transformers is not installed (a dry run in an
    environment without it): :func:`build` names what is missing then; and where the model brings its own weights
    (HAS_WEIGHTS: no checkpoint is built)."""
    import importlib.util

    if has_weights or importlib.util.find_spec("transformers") is None or importlib.util.find_spec("torch") is None:
        return
    import torch

    with _quiet_transformers():
        hf_config = hf_config_of(config)
        from transformers import AutoModelForCausalLM

        try:
            with torch.device("meta"):
                AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32)
        except Exception as exc:  # any constructor failure: the build would be exit 4 after the run directory
            raise InputError(
                f"transformers cannot build a causal-LM model of model_type {config.get('model_type')!r} from this "
                f"config: {type(exc).__name__}: {_first_line(exc)}"
            ) from None


def nearest(word: str, known: Any, n: int = 3) -> str:
    """``; nearest: a, b, c`` for the N known names closest to WORD (never the whole list: transformers' own
    message names all ~400 model types in one line)."""
    close = difflib.get_close_matches(word, sorted(known), n=n, cutoff=0.5)
    return f"; nearest: {', '.join(close)}" if close else ""


def _first_line(exc: BaseException) -> str:
    lines = [x.strip() for x in str(exc).strip().splitlines() if x.strip()]
    line = " ".join(lines[:2]) if lines and lines[0].endswith(":") else (lines[0] if lines else "")
    return line if len(line) <= 300 else line[:297] + "..."


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers' progress bars (``Writing model shards``) and its warnings off for the build, through its own
    switches (``transformers.utils.logging``), then back as they were."""
    from transformers.utils import logging as hf_logging

    bars, verbosity = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def write_tokenizer(vocab_size: int, out: Path) -> None:
    """An offline tokenizer: ``<pad> <s> </s> <unk>`` then ``t4 … t<vocab-1>``, split on whitespace."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    vocab.update({f"t{i}": i for i in range(len(SPECIAL_TOKENS), vocab_size)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.save_pretrained(out)
