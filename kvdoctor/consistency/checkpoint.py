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

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Mapping
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
    """Write the model (safetensors, float32) and a WordLevel tokenizer to OUT."""
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError as exc:
        raise InputError(
            f"a random checkpoint needs torch and transformers ({exc}); run from .venv-server (make server-env)"
        ) from None
    fields = {k: v for k, v in config.items() if k not in ("model_type", "architectures", "transformers_version")}
    try:
        hf_config = AutoConfig.for_model(str(config["model_type"]), **fields)
    except (KeyError, ValueError) as exc:
        raise InputError(
            f"transformers cannot build a config for model_type {config.get('model_type')!r}: {exc}"
        ) from None
    hf_config.initializer_range = STD
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(hf_config, torch_dtype=torch.float32)
    model.save_pretrained(out, safe_serialization=True)
    write_tokenizer(int(config["vocab_size"]), out)


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
