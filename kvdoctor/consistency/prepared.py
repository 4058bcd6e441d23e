"""What a consistency run knows before anything starts: its options, its prepared inputs, and what the machine must
hold for them (shared by every server's room, :mod:`kvdoctor.consistency.servers`, and the run)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvdoctor._exceptions import InputError
from kvdoctor.consistency import checkpoint, footprint, runnable
from kvdoctor.consistency.deploy import PlanChoices
from kvdoctor.consistency.workload import Workload, prompts
from kvdoctor.core.declared import argument, group, option
from kvdoctor.core.paths import DEFAULT_SCENARIO
from kvdoctor.core.servers import DEFAULT_SERVER

if TYPE_CHECKING:
    from kvdoctor.consistency import deploy
    from kvdoctor.consistency.prefix import PrefixWorkload

STANDIN_LOG = "stand-in-calls.log"  # the CPU stand-in's calls (every run's JSON names it; SGLang's writes it)
MAX_UNSHRUNK_HIDDEN = 1024  # a random checkpoint of a config wider than this is too big to write
WARM_UP_TOKENS = 4  # new tokens of the warm-up request (at most the workload's own)


@dataclass(frozen=True)
class ConsistencyOptions:
    """A consistency run's options, each declared once here: ``kvdoctor consistency``'s options (and ``bench
    consistency``'s share of them) and :func:`kvdoctor.api.consistency`'s keyword arguments are made from these
    fields (``kvdoctor.core.declared``); the fields after ``junit_path`` are set by the commands built on the run."""

    model: str = argument(help="Model directory, bundled fixture name (e.g. llama-3.1-8b) or HF id.")
    shrink: bool = option(False, "--shrink", help="Make the config tiny (2-4 layers, every layer kind kept).")
    topology: str = option("single", "--topology", help="single: one server each; pd (SGLang): prefill+decode+router.")
    device: str = option("cpu", "--device", help="cpu or cuda.")
    server: str = option(  # whose servers run: sglang, or vllm (single only)
        DEFAULT_SERVER.value,
        "--server",
        help="sglang, or vllm (single only; vLLM flags after --; run from the vLLM server env).",
    )
    inject: str | None = option(
        None,
        "--inject",
        help="A fault armed inside the servers for the pressured burst, in the role its record names (kvdoctor "
        "faults): a retraction fault in the PD decode, a transfer fault in the prefill or decode, a radix-hit or "
        "window fault in the pressured server; vllm: the pressured server.",
    )
    fault_file: Path | None = option(  # the user's own fault (kvdoctor.consistency.fault_file)
        None,
        "--fault-file",
        help="Your own fault: a Python file wrapping server functions in a role (prefill, decode, single, any), "
        "installed inside those servers and armed for the pressured burst (docs/fault-file.md). Not with --inject.",
    )
    bundle: Path | None = option(  # a red run's reproduction bundle is copied here (consistency.bundle)
        None,
        "--bundle",
        help="A red run's reproduction bundle is also copied here (a new or empty folder): the servers' launch "
        "lines, the checkpoint, the prompts, a stand-alone client that needs no kvdoctor, the expected and observed "
        "tokens and an issue text. Every red run writes one in its run directory.",
    )
    scenario: str = option(  # a name of kvdoctor.consistency.scenarios.SCENARIOS
        DEFAULT_SCENARIO,
        "--scenario",
        help="preempt: forced preemption; prefix-cache (vllm; sglang --topology single): the same prefixes hit in the "
        "prefix cache, evicted, sent again, against a server without prefix caching; transfer (sglang --topology pd): "
        "every request's state sent by the prefill and committed by the decode, both decodes roomy; offload (vllm, GPU "
        "only: vLLM refuses it on CPU): preemption with vLLM's OffloadingConnector on the pressured server, resumed "
        "requests loaded from its CPU tier.",
    )
    workload: Workload = group(Workload)
    output_dir: Path = option(
        Path("kvdoctor-out/consistency"), "--output-dir", help="Run directories and the checkpoint cache go here."
    )
    timeout_s: float = option(1800.0, "--timeout", help="Seconds for the whole run.", keyword="timeout")
    junit_path: Path | None = option(None, "--junit", help="Write JUnit XML, one case per gate.")
    host: str = "127.0.0.1"
    request_timeout_s: float = 600.0
    grace_s: float = 10.0
    extra_args: tuple[str, ...] = ()  # every server's flags (what follows -- on the command line)
    plan: PlanChoices | None = None  # pd-eval --oracle tokens: its deployment (pd only); None: consistency's
    subject_args: tuple[str, ...] = ()  # server flags for the subject alone (PD: its decode): a sweep's configuration
    server_path: tuple[str, ...] = ()  # folders first on every server's PYTHONPATH (a release overlay, SGLang)


@dataclass(frozen=True)
class Prepared:
    """Everything a run needs, decided before anything starts (the server's room adds the prompts or phases)."""

    options: ConsistencyOptions
    config: dict[str, Any]
    kind: runnable.ModelKind
    real_weights: Path | None  # a model directory with its own safetensors (used as is)
    stand_in: bool
    vocab_size: int
    prompts: list[list[int]] = field(default_factory=list)
    source: str = ""  # where the config came from (the vLLM pool sizing parses it again)
    prefix: PrefixWorkload | None = None  # --scenario prefix-cache: its phases (prompts are the compared)


def has_weights(model: str) -> Path | None:
    path = Path(model).expanduser()
    return path if path.is_dir() and any(path.glob("*.safetensors")) else None


def vocab(o: ConsistencyOptions, config: dict[str, Any], weights: Path | None, source: object) -> int:
    """The vocabulary prompt token ids are drawn from; a big model without weights must be shrunk (every server)."""
    size = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    if not isinstance(size, int):
        raise InputError(f"{source}: no integer vocab_size to draw prompt token ids from")
    hidden = config.get("hidden_size") or (config.get("text_config") or {}).get("hidden_size") or 0
    if weights is None and not o.shrink and int(hidden) > MAX_UNSHRUNK_HIDDEN:
        raise InputError(
            f"{o.model} has no weights here (no *.safetensors) and hidden_size {hidden}: pass --shrink for a tiny "
            "seeded random checkpoint, or a model directory with its weights"
        )
    return size


def footprint_of(prepared: Prepared, deployment: deploy.Deployment) -> footprint.Footprint:
    """What the run will hold (:mod:`kvdoctor.consistency.footprint`): the checkpoint it must build (none when the
    model directory brings its weights or the cache holds it), every server of DEPLOYMENT with its pool, and
    kvdoctor's prompts and replies (a prefix-cache run's eviction phase included)."""
    o = prepared.options
    w = o.workload
    cache = checkpoint.cache_dir(o.output_dir, prepared.config, w.seed)
    loaded = prepared.real_weights or (cache if (cache / checkpoint.DIGEST_FILE).is_file() else None)
    weights = footprint.safetensors_weights(loaded) if loaded is not None else None
    servers = [footprint.Server(s.role, _pool_of(deployment, s.role)) for s in deployment.steps]
    requests = w.requests
    if prepared.prefix is not None:
        requests += sum(len(ph.prompts) for ph in prepared.prefix.phases if not ph.compared)
    return footprint.estimate(
        prepared.config,
        servers,
        weights=weights,
        build=weights is None,
        device=o.device,
        requests=requests,
        prompt_tokens=w.prompt_tokens + (prepared.prefix.prefix_tokens if prepared.prefix is not None else 0),
        max_new_tokens=w.max_new_tokens,
    )


def _pool_of(deployment: deploy.Deployment, role: str) -> int:
    """The pool tokens ROLE's server holds: a router none, the pressured server (or decode) the tight pool, every
    other server (reference, its decode, the shared prefill) the roomy one."""
    if role.startswith("router"):
        return 0
    return deployment.pressured_pool if role.endswith("pressured") else deployment.reference_pool


def check_footprint(prepared: Prepared, deployment: deploy.Deployment) -> None:
    """Refuse (exit 2, the numbers) a run this machine cannot hold: connections, memory, disk."""
    o = prepared.options
    footprint.check_connections(o.workload.in_flight, footprint.open_files())
    hint = ""
    if prepared.real_weights is None and not o.shrink:
        hint = ": pass --shrink for a tiny seeded random checkpoint, or a model directory with its weights"
    elif o.shrink:
        hint = ": lower --requests, --concurrency, --prompt-tokens or --max-new-tokens"
    footprint.check(
        footprint_of(prepared, deployment),
        memory=footprint.available_memory(),
        disk=footprint.free_disk(o.output_dir),
        output_dir=o.output_dir,
        hint=hint,
    )


def check_footprint_counts(prepared: Prepared, *, requests: int, prompt_tokens: int) -> None:
    """kvdoctor's own share alone (prompts and replies), before a workload's prompts are built."""
    w = prepared.options.workload
    need = footprint.client_bytes(requests, prompt_tokens, w.max_new_tokens)
    memory = footprint.available_memory()
    if need > memory:
        raise InputError(
            f"{requests:,} prompts of {prompt_tokens:,} tokens with {w.max_new_tokens:,} new tokens each would hold "
            f"~{footprint.gib(need)} in kvdoctor alone, and {footprint.gib(memory)} is available "
            f"({footprint.MEMORY_WHERE}): lower --requests, --prompt-tokens or --max-new-tokens"
        )


def warm_up(prepared: Prepared) -> tuple[Workload, list[list[int]]]:
    """The one short request each server gets before the compared bursts (its first request pays start-up costs
    outside them); under ``--scenario prefix-cache`` it must cache no compared prompt's first block."""
    w = prepared.options.workload
    warm = Workload(1, w.prompt_tokens, min(WARM_UP_TOKENS, w.max_new_tokens), 1, w.seed)  # never past the context
    return warm, prompts(warm, prepared.vocab_size)[:1]
