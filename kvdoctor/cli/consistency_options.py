"""The options every command built on ``kvdoctor consistency``'s run shares (``consistency``, ``bench
consistency``), declared once so their spelling, help and default cannot drift apart."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvdoctor.api._consistency import DEFAULT_OUTPUT_DIR, DEFAULT_TIMEOUT_S, WORKLOAD
from kvdoctor.core import servers

DEFAULT_SERVER = servers.DEFAULT_SERVER.value  # --server's default: the head line names another server only

ModelArgument = Annotated[
    str, typer.Argument(help="Model directory, bundled fixture name (e.g. llama-3.1-8b) or HF id.")
]
ShrinkOption = Annotated[
    bool, typer.Option("--shrink", help="Make the config tiny (2-4 layers, every layer kind kept).")
]
TopologyOption = Annotated[
    str, typer.Option("--topology", help="single: one server each; pd (SGLang): prefill+decode+router.")
]
ServerDeviceOption = Annotated[str, typer.Option("--device", help="cpu or cuda.")]
RequestsOption = Annotated[int, typer.Option("--requests", help="Prompts (seeded random token ids).")]
PromptTokensOption = Annotated[int, typer.Option("--prompt-tokens", help="Tokens per prompt.")]
MaxNewTokensOption = Annotated[int, typer.Option("--max-new-tokens", help="Greedy tokens per request.")]
ConcurrencyOption = Annotated[int, typer.Option("--concurrency", help="Requests in flight (the same for every run).")]
SeedOption = Annotated[int, typer.Option("--seed", help="Seeds the prompts and the random checkpoint.")]
OutputDirOption = Annotated[
    Path, typer.Option("--output-dir", help="Run directories and the checkpoint cache go here.")
]
TimeoutOption = Annotated[float, typer.Option("--timeout", help="Seconds for the whole run.")]
BundleOption = Annotated[
    Path | None,
    typer.Option(
        "--bundle",
        help="A red run's reproduction bundle is also copied here (a new or empty folder): the servers' launch "
        "lines, the checkpoint, the prompts, a stand-alone client that needs no kvdoctor, the expected and observed "
        "tokens and an issue text. Every red run writes one in its run directory.",
    ),
]
FaultFileOption = Annotated[
    Path | None,
    typer.Option(
        "--fault-file",
        help="Your own fault: a Python file wrapping server functions in a role (prefill, decode, single, any), "
        "installed inside those servers and armed for the pressured burst (docs/fault-file.md). Not with --inject.",
    ),
]

__all__ = [
    "DEFAULT_OUTPUT_DIR",
    "DEFAULT_SERVER",
    "DEFAULT_TIMEOUT_S",
    "WORKLOAD",
    "BundleOption",
    "ConcurrencyOption",
    "FaultFileOption",
    "MaxNewTokensOption",
    "ModelArgument",
    "OutputDirOption",
    "PromptTokensOption",
    "RequestsOption",
    "SeedOption",
    "ServerDeviceOption",
    "ShrinkOption",
    "TimeoutOption",
    "TopologyOption",
]
