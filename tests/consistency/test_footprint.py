"""The size guard reads the whole config and a model directory's real safetensors (issue 28, defect 5): what does
not fit this machine's memory or disk is exit 2 with the numbers, before the run directory exists, on both
servers. The machine is made small here (available memory and free disk patched), so the verdicts do not depend
on the box the tests run on."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvdoctor._exceptions import InputError
from kvdoctor.cli.app import app
from kvdoctor.consistency import footprint
from kvdoctor.core.config import resolve_config_path

GIB = footprint.GIB
MACHINE = 24 * GIB  # the machine


def llama(**changes: object) -> dict[str, object]:
    config = json.loads(resolve_config_path("llama-3.1-8b").read_text())
    return {**config, **changes}


# The config: hidden 1024, 2 layers, a 2,000,000-token vocabulary (its embeddings and untied head are
# ~4.1 billion parameters, ~16 GB in float32), which passed the hidden_size-only guard.
WIDE_VOCAB = {
    "hidden_size": 1024,
    "num_hidden_layers": 2,
    "vocab_size": 2_000_000,
    "intermediate_size": 4096,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "head_dim": 128,
}


def test_the_parameter_count_reads_every_part_of_the_config() -> None:
    base = footprint.parameters(llama(**WIDE_VOCAB))
    hidden, vocab = WIDE_VOCAB["hidden_size"], WIDE_VOCAB["vocab_size"]
    assert base > 2 * vocab * hidden, "embeddings and an untied head"
    tied = footprint.parameters(llama(**WIDE_VOCAB, tie_word_embeddings=True))
    assert base - tied == vocab * hidden, "a tied head shares the embeddings"
    deeper = footprint.parameters(llama(**{**WIDE_VOCAB, "num_hidden_layers": 4}))
    wider = footprint.parameters(llama(**{**WIDE_VOCAB, "intermediate_size": 8192}))
    assert deeper - base == base - footprint.parameters(llama(**{**WIDE_VOCAB, "num_hidden_layers": 0})), "per layer"
    assert wider - base == 2 * 3 * hidden * 4096, "gate, up and down, on both layers"
    moe = llama(**WIDE_VOCAB, num_local_experts=8, moe_intermediate_size=4096)
    assert footprint.parameters(moe) - base == 2 * (7 * 3 * hidden * 4096 + hidden * 8), "every expert and its router"


def test_kv_bytes_per_token_are_float32_keys_and_values_over_every_layer() -> None:
    c = llama(**WIDE_VOCAB)
    assert footprint.kv_bytes_per_token(c) == 2 * 2 * 8 * 128 * footprint.FLOAT32
    assert footprint.kv_bytes_per_token({**c, "num_key_value_heads": 2}) * 4 == footprint.kv_bytes_per_token(c)


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]], data: bytes = b"") -> None:
    """A safetensors file as the format says: an 8-byte little-endian header length, the JSON header, the data."""
    offset = 0
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    for name, (dtype, shape) in tensors.items():
        size = footprint.DTYPE_BYTES[dtype]
        for n in shape:
            size *= n
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def test_a_model_directorys_safetensors_headers_give_its_exact_parameters(tmp_path: Path) -> None:
    write_safetensors(tmp_path / "model-00001.safetensors", {"a": ("BF16", [3, 4]), "b": ("F32", [5])})
    write_safetensors(tmp_path / "model-00002.safetensors", {"c": ("F16", [2, 2, 2])})
    w = footprint.safetensors_weights(tmp_path)
    assert (w.parameters, w.files) == (12 + 5 + 8, 2)
    assert w.disk_bytes == sum(f.stat().st_size for f in tmp_path.glob("*.safetensors"))
    (tmp_path / "model-00003.safetensors").write_bytes(b"\xff" * 16)
    with pytest.raises(InputError, match="not a readable safetensors file"):
        footprint.safetensors_weights(tmp_path)


def _estimate(config: dict[str, object], pools: tuple[int, ...] = (8192, 768), **kw: object) -> footprint.Footprint:
    servers = [footprint.Server(f"s{i}", p) for i, p in enumerate(pools)]
    args: dict[str, object] = dict(weights=None, build=True, device="cpu", requests=32, prompt_tokens=32)
    return footprint.estimate(config, servers, max_new_tokens=64, **{**args, **kw})  # type: ignore[arg-type]


def test_every_server_holds_the_float32_weights_and_its_pool_and_a_router_none() -> None:
    f = _estimate(llama(**WIDE_VOCAB), (8192, 0))
    (_, server), (_, router) = f.servers
    assert server == footprint.SERVER_BASE_BYTES + f.parameters * 4 + 8192 * f.kv_bytes_per_token
    assert router < footprint.SERVER_BASE_BYTES
    assert f.checkpoint_bytes == f.parameters * 4
    assert _estimate(llama(**WIDE_VOCAB), build=False).checkpoint_bytes == 0, "reused: nothing to write"
    gpu = _estimate(llama(**WIDE_VOCAB), device="cuda")
    assert all(b == footprint.SERVER_BASE_BYTES for _, b in gpu.servers), "weights and pools go to the GPU"


def test_what_does_not_fit_is_refused_with_the_numbers(tmp_path: Path) -> None:
    f = _estimate(llama(**WIDE_VOCAB))
    assert 15 * GIB < f.checkpoint_bytes < 16 * GIB
    with pytest.raises(InputError, match=r"the run would hold ~3\d\.\d GiB in memory at once, and 24\.0 GiB"):
        footprint.check(f, memory=MACHINE, disk=100 * GIB, output_dir=tmp_path)
    with pytest.raises(InputError, match=r"checkpoint would take ~15\.\d GiB on disk, and .* has 10\.0 GiB free"):
        footprint.check(f, memory=MACHINE, disk=10 * GIB, output_dir=tmp_path)
    with pytest.raises(InputError, match=r"building the random checkpoint would hold ~16\.\d GiB"):
        footprint.check(f, memory=12 * GIB, disk=100 * GIB, output_dir=tmp_path)
    footprint.check(f, memory=64 * GIB, disk=100 * GIB, output_dir=tmp_path)  # a bigger machine takes it
    small = _estimate(llama(**{**WIDE_VOCAB, "vocab_size": 32_000}))
    footprint.check(small, memory=MACHINE, disk=100 * GIB, output_dir=tmp_path)


def test_the_available_memory_is_positive_and_within_the_machines() -> None:
    import psutil

    assert 0 < footprint.available_memory() <= psutil.virtual_memory().total


def test_more_in_flight_than_open_files_is_refused() -> None:
    footprint.check_connections(100, 100 + footprint.SPARE_FILES)
    with pytest.raises(InputError, match="101 requests in flight"):
        footprint.check_connections(101, 100 + footprint.SPARE_FILES)


# --- the command, on the machine: refused before the run directory exists, both servers ---


def small_machine(monkeypatch: pytest.MonkeyPatch, memory: int = MACHINE, disk: int = 500 * GIB) -> None:
    monkeypatch.setattr(footprint, "available_memory", lambda: memory)
    monkeypatch.setattr(footprint, "free_disk", lambda _path: disk)


@pytest.mark.parametrize("server", ["sglang", "vllm"])
def test_a_two_million_token_vocabulary_without_shrink_is_refused_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: str
) -> None:
    model = tmp_path / "wide-vocab"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(llama(**WIDE_VOCAB)))
    small_machine(monkeypatch)
    out = tmp_path / "out"
    done = CliRunner().invoke(app, ["consistency", str(model), "--server", server, "--output-dir", str(out)])
    assert done.exit_code == 2, done.output
    assert "in memory at once, and 24.0 GiB is available" in done.output and "pass --shrink" in done.output
    assert not out.exists() or list(out.iterdir()) == [], "no run directory, no checkpoint"


def test_a_model_directorys_own_weights_are_counted_from_their_headers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small config whose safetensors hold 4 billion parameters (headers only: the file is a few bytes)."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(llama(**{**WIDE_VOCAB, "vocab_size": 32_000})))
    write_safetensors(
        model / "model.safetensors", {"embed": ("BF16", [2_000_000, 1024]), "head": ("BF16", [2_000_000, 1024])}
    )
    small_machine(monkeypatch)
    done = CliRunner().invoke(app, ["consistency", str(model), "--dry-run", "--output-dir", str(tmp_path / "out")])
    assert done.exit_code == 2, done.output
    assert "4,096,000,000 parameters from the safetensors headers" in done.output
