"""What a consistency run will hold in memory and on disk, estimated before anything is written or started.

A run writes a seeded random checkpoint (``transformers`` ``from_config`` in float32, in kvdoctor's own process,
then saved: the parameters once in memory and once on disk), then starts every server at once, each loading the
whole model in float32 (``--dtype float32``: the CPU path of both servers) beside its KV pool
(``--max-total-tokens`` / ``--num-gpu-blocks-override``, the pools the plan sized), while kvdoctor holds every
prompt and every reply of three bursts. The parameters are counted from the safetensors headers of a model directory
or a cached checkpoint (exact shapes; only the first 8 bytes and the JSON header of each file are read), else
exactly as the build will make them (transformers on torch's meta device, where transformers is installed: the
environment that can build a checkpoint at all), else by the dense formula over the whole config (vocabulary,
layers, widths, experts, a tied or untied head). Each is refused (exit 2, the numbers) when it does not fit
what this machine has: available memory (``psutil``, capped by a cgroup limit) and the free disk under
``--output-dir``. Before this, a config was judged by its ``hidden_size`` alone, and hidden 1024 with a
2,000,000-token vocabulary went straight to writing a ~16 GB checkpoint on a 24 GiB machine.

Estimates, not measurements: the formula (attention, MLP or every expert, embeddings, head; recurrent mixers
counted as attention; a head whose tying the config leaves unsaid counted untied) misses what a config nests beside
its text model (a vision tower: a Gemma 3 whose tower --shrink once left whole was 349 M parameters on the meta
device, 0.6 M by the formula); the KV bytes count every layer as attention (a hybrid's recurrent layers hold less);
the server's own base (an interpreter with torch and the server imported) is :data:`SERVER_BASE_BYTES`. GPU memory
(``--device cuda``) is not checked: the servers' weights and pools go there. Torch-free but for
:func:`built_parameters` (torch and transformers imported there only).
"""

from __future__ import annotations

import json
import math
import resource
import shutil
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvdoctor._exceptions import InputError

FLOAT32 = 4  # bytes: what the CPU servers and the checkpoint builder hold every parameter and KV element in
GIB = 1 << 30
# One server before its weights and pool. Measured (SGLang 0.5.23 on this CPU, a shrunk Llama, psutil over each
# server's 4 processes): 1.0 GiB unique (USS) each, 1.7-1.8 GiB resident with the shared libraries counted again.
SERVER_BASE_BYTES = 3 * GIB // 2
# kvdoctor's own bytes per token: a prompt id in a list (41 B measured with tracemalloc) and one output token of a
# burst (token, logprob, top-2 margin in a Generation: 106 B measured), each with headroom for the JSON replies
# parsed and the comparison; a run holds three bursts (reference, its repeat, pressured).
PROMPT_TOKEN_BYTES = 64
OUTPUT_TOKEN_BYTES = 256
BURSTS = 3
SPARE_FILES = 256  # descriptors kept free beside one connection per request in flight (logs, pipes, sockets)
SAFETENSORS_HEADER_MAX = 100 << 20  # a header longer than this is not a safetensors file
DTYPE_BYTES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2}
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
UNMEASURED = 1 << 62  # bytes assumed where the free disk cannot be read
MEMORY_WHERE = "psutil.virtual_memory().available, capped by the cgroup's memory limit"


def _text(config: Mapping[str, Any]) -> Mapping[str, Any]:
    for key in ("thinker_config", "llm_config", "language_config", "text_config"):
        nested = config.get(key)
        if isinstance(nested, Mapping):
            return nested
    return config


def _int(c: Mapping[str, Any], *keys: str, default: int = 0) -> int:
    for key in keys:
        value = c.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return default


def head_dim(c: Mapping[str, Any]) -> int:
    hidden, heads = _int(c, "hidden_size", "d_model", "n_embd"), _int(c, "num_attention_heads", "n_head", default=1)
    return _int(c, "head_dim", default=max(1, hidden // heads))


def parameters(config: Mapping[str, Any]) -> int:
    """The parameter count ``from_config`` gives CONFIG's text model, by the dense formula (where
    :func:`built_parameters` cannot count them exactly)."""
    c = _text(config)
    vocab, hidden = _int(c, "vocab_size", "padded_vocab_size"), _int(c, "hidden_size", "d_model", "n_embd")
    layers = _int(c, "num_hidden_layers", "num_layers", "n_layer")
    heads, dim = _int(c, "num_attention_heads", "n_head", default=1), head_dim(c)
    kv_heads = _int(c, "num_key_value_heads", "num_kv_heads", default=heads)
    if _int(c, "kv_lora_rank"):  # MLA: q through its rank (or plain), compressed KV up-projected per head
        qk = _int(c, "qk_nope_head_dim") + _int(c, "qk_rope_head_dim")
        v, rank, q_rank = _int(c, "v_head_dim", default=qk), _int(c, "kv_lora_rank"), _int(c, "q_lora_rank")
        q = q_rank * (hidden + heads * qk) if q_rank else hidden * heads * qk
        attention = (
            q + hidden * (rank + _int(c, "qk_rope_head_dim")) + rank * heads * (qk - _int(c, "qk_rope_head_dim") + v)
        )
        attention += heads * v * hidden
    else:
        attention = 2 * hidden * heads * dim + 2 * hidden * kv_heads * dim
    intermediate = _int(c, "intermediate_size", "ffn_dim", "block_ff_dim", "n_inner", default=4 * hidden)
    experts = _int(c, *EXPERT_KEYS)
    if experts:
        moe = _int(c, "moe_intermediate_size", default=intermediate)
        shared = _int(c, "shared_expert_intermediate_size") or _int(c, "n_shared_experts") * moe
        mlp = experts * 3 * hidden * moe + 3 * hidden * shared + hidden * experts
    else:
        mlp = 3 * hidden * intermediate
    tied = c.get("tie_word_embeddings", config.get("tie_word_embeddings")) is True
    head = 0 if tied else vocab * hidden
    return vocab * hidden + head + layers * (attention + mlp + 2 * hidden) + hidden


def built_parameters(config: Mapping[str, Any]) -> int | None:
    """The exact parameter count of the checkpoint :func:`kvdoctor.consistency.checkpoint.build` writes for
    CONFIG: the same ``AutoConfig.for_model`` and ``AutoModelForCausalLM.from_config``, on torch's meta device
    (shapes only, no memory). None when torch or transformers is missing here (the build would refuse then) or
    transformers cannot build the config (refused where the checkpoint is built); the formula stands in."""
    import contextlib
    import io
    import warnings

    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
        from transformers.utils import logging as hf_logging
    except ImportError:
        return None
    fields = {k: v for k, v in config.items() if k not in ("model_type", "architectures", "transformers_version")}
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its config warnings are the build's to print, not the estimate's
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()), torch.device("meta"):
            warnings.simplefilter("ignore")
            model = AutoModelForCausalLM.from_config(AutoConfig.for_model(str(config["model_type"]), **fields))
        return int(sum(p.numel() for p in model.parameters()))
    except Exception:  # any failure here is the build's to report, with its own message
        return None
    finally:
        hf_logging.set_verbosity(verbosity)


def kv_bytes_per_token(config: Mapping[str, Any]) -> int:
    """Float32 KV bytes one token holds over every layer (MLA: the compressed latent and the rope key)."""
    c = _text(config)
    layers = _int(c, "num_hidden_layers", "num_layers", "n_layer", default=1)
    if _int(c, "kv_lora_rank"):
        return layers * (_int(c, "kv_lora_rank") + _int(c, "qk_rope_head_dim")) * FLOAT32
    heads = _int(c, "num_attention_heads", "n_head", default=1)
    kv_heads = _int(c, "num_key_value_heads", "num_kv_heads", default=heads)
    return 2 * layers * kv_heads * head_dim(c) * FLOAT32


@dataclass(frozen=True)
class Weights:
    """A model directory's safetensors: the parameters they hold and their bytes on disk."""

    parameters: int
    disk_bytes: int
    files: int


def safetensors_weights(directory: Path) -> Weights:
    """Every ``*.safetensors`` header of DIRECTORY read (8-byte little-endian length, then JSON): the exact
    parameter count and the files' sizes; ``InputError`` for a file that is not safetensors."""
    params = size = 0
    files = sorted(directory.glob("*.safetensors"))
    for f in files:
        try:
            with f.open("rb") as fh:
                (length,) = struct.unpack("<Q", fh.read(8))
                if length > SAFETENSORS_HEADER_MAX:
                    raise ValueError(f"header of {length} bytes")
                header = json.loads(fh.read(length))
            size += f.stat().st_size
        except (OSError, ValueError, struct.error) as exc:
            raise InputError(f"{f}: not a readable safetensors file ({exc})") from None
        for name, tensor in header.items():
            if name != "__metadata__" and isinstance(tensor, dict):
                params += math.prod(int(n) for n in tensor.get("shape", []))
    return Weights(params, size, len(files))


def available_memory() -> int:
    """Bytes a new process can take now: the kernel's available memory, capped by this cgroup's limit (v2
    ``memory.max`` less ``memory.current``; v1 ``memory.limit_in_bytes`` less ``memory.usage_in_bytes``)."""
    import psutil

    free = int(psutil.virtual_memory().available)
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        try:
            limit, usage = (Path(p).read_text(encoding="ascii").strip() for p in (limit_file, usage_file))
            free = min(free, int(limit) - int(usage))
        except (OSError, ValueError):  # no such cgroup, or "max": no limit
            continue
    return max(free, 0)


def free_disk(path: Path) -> int:
    """Free bytes on the file system PATH (or its nearest existing parent) would be written to."""
    probe = path.expanduser().absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free
    except OSError:  # unmeasurable here: not refused on a guess (an unwritable --output-dir is refused elsewhere)
        return UNMEASURED


def open_files() -> int:
    """This process's soft limit on open file descriptors (every request in flight holds a connection)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def gib(n: float) -> str:
    """N bytes for a person: GiB, or MiB below one GiB."""
    return f"{n / GIB:,.1f} GiB" if n >= GIB else f"{n / (1 << 20):,.1f} MiB"


@dataclass(frozen=True)
class Server:
    role: str
    pool_tokens: int  # 0: no model (a router)


@dataclass(frozen=True)
class Footprint:
    """Bytes a run needs: its checkpoint (0 when reused or the model's own), each server, kvdoctor's replies."""

    parameters: int
    checkpoint_bytes: int  # written to disk (and held once in memory while it is built)
    servers: tuple[tuple[str, int], ...]  # (role, bytes) of every process started at once
    client_bytes: int
    kv_bytes_per_token: int
    counted: str = "config formula"  # how the parameters were counted

    @property
    def running_bytes(self) -> int:
        return sum(b for _, b in self.servers) + self.client_bytes

    def describe(self) -> str:
        each = ", ".join(f"{role} {gib(b)}" for role, b in self.servers)
        return (
            f"{self.parameters:,} parameters from the {self.counted} ({gib(self.parameters * FLOAT32)} in float32); "
            f"servers: {each}; "
            f"kvdoctor's prompts and replies {gib(self.client_bytes)}"
        )


def client_bytes(requests: int, prompt_tokens: int, max_new_tokens: int) -> int:
    """What kvdoctor holds: every prompt, and every reply of the three bursts."""
    return requests * (prompt_tokens * PROMPT_TOKEN_BYTES + BURSTS * max_new_tokens * OUTPUT_TOKEN_BYTES)


def estimate(
    config: Mapping[str, Any],
    servers: Sequence[Server],
    *,
    weights: Weights | None,
    build: bool,
    device: str,
    requests: int,
    prompt_tokens: int,
    max_new_tokens: int,
) -> Footprint:
    """The run's footprint: CONFIG's parameters (WEIGHTS' when a model directory brings them), a checkpoint to
    BUILD, each of SERVERS (on a CPU: float32 weights, the pool, the base; on a GPU: its host-side base only)."""
    if weights is not None:
        params, counted = weights.parameters, "safetensors headers"
    elif (exact := built_parameters(config)) is not None:
        params, counted = exact, "transformers from_config on the meta device"
    else:
        params, counted = parameters(config), "config formula"
    per_token = kv_bytes_per_token(config)
    rows = []
    for s in servers:
        if s.pool_tokens <= 0:
            rows.append((s.role, SERVER_BASE_BYTES // 4))  # a router: an interpreter, no model
        elif device == "cpu":
            rows.append((s.role, SERVER_BASE_BYTES + params * FLOAT32 + s.pool_tokens * per_token))
        else:
            rows.append((s.role, SERVER_BASE_BYTES))
    return Footprint(
        params,
        params * FLOAT32 if build else 0,
        tuple(rows),
        client_bytes(requests, prompt_tokens, max_new_tokens),
        per_token,
        counted,
    )


def check(f: Footprint, *, memory: int, disk: int, output_dir: Path, hint: str = "", where: str = MEMORY_WHERE) -> None:
    """Refuse (exit 2, the numbers) a footprint this machine cannot hold: the checkpoint on disk and in memory
    while it is built, then every server and kvdoctor's replies at once. HINT follows the numbers (what to do)."""
    tail = f" ({f.describe()}){hint}"
    if f.checkpoint_bytes > disk:
        raise InputError(
            f"the random checkpoint would take ~{gib(f.checkpoint_bytes)} on disk, and {output_dir} has "
            f"{gib(disk)} free{tail}"
        )
    if f.checkpoint_bytes + SERVER_BASE_BYTES > memory:
        raise InputError(
            f"building the random checkpoint would hold ~{gib(f.checkpoint_bytes + SERVER_BASE_BYTES)} in memory, "
            f"and {gib(memory)} is available ({where}){tail}"
        )
    if f.running_bytes > memory:
        raise InputError(
            f"the run would hold ~{gib(f.running_bytes)} in memory at once, and {gib(memory)} is available "
            f"({where}){tail}"
        )


def check_connections(in_flight: int, limit: int) -> None:
    """Every request in flight holds one connection (``client.generate_all``: one worker each); past this process's
    open-file limit the client fails mid-run with "Too many open files"."""
    if in_flight + SPARE_FILES > limit:
        raise InputError(
            f"--concurrency: {in_flight:,} requests in flight each hold a connection, and this process may open "
            f"{limit:,} files (ulimit -n; {SPARE_FILES} kept for logs and pipes): lower --concurrency to at most "
            f"{max(1, limit - SPARE_FILES):,} or raise ulimit -n"
        )
