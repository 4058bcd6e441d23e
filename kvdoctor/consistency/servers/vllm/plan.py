"""The two deployments of a consistency run on vLLM (``--server vllm``), as launch plans.

The same shape as SGLang's (:mod:`kvdoctor.consistency.deploy`): a *reference* with a roomy pool (nothing is
preempted) and a *pressured* server whose pool is too small for the workload's concurrent demand, so vLLM's
scheduler must preempt (``Scheduler._preempt_request``: the request's blocks are freed and it is recomputed on
resume). Both get the same model directory, flags and concurrency; only ``--num-gpu-blocks-override`` differs.
Pure data: ``--dry-run`` prints exactly what starts.

The pool is counted in vLLM's blocks, sized from kvdoctor's own model of vLLM's KV cache groups
(:func:`kvdoctor.core.vllm.analysis.analyze_vllm_config`): every group takes its blocks from one shared pool, a
full-attention group ``ceil(tokens / block_size)`` per request, a sliding-window group at most its window's
blocks, a Mamba group one state block. Hybrids pad their attention pages to the Mamba page (a far larger block),
so a pool sized in tokens would not preempt them; sized in blocks per group it does. vLLM preempts only a
running request that needs a new block, so an attention block the workload never outgrows is refused before
launch; ``--shrink`` keeps a Mamba2 hybrid's state small for vLLM (:data:`kvdoctor.consistency.shrink.
VLLM_MAMBA_STATE`, named in the output) so its attention block stays at 32 tokens.

What a scenario changes (``--scenario prefix-cache``: both servers at one pool, prefix caching the only
difference; ``--scenario offload``: vLLM's OffloadingConnector on the pressured server) is its part's, in this room
(``consistency/servers/vllm/<scenario>.py``), one line of :data:`SCENARIOS` each; the plan asks the run's part for
its flags, pools, environment and enablers (:class:`PlanPart`) and names no scenario.

Only ``single`` (two servers): vLLM's PD (a KV connector) is not part of this command. On a CPU kvdoctor
names every change it makes (an *enabler*): vLLM's CPU attention wants block sizes in multiples of 32, float32
keeps near-tied random-weight logits from flipping, and a Mamba hybrid is served without prefix caching
(its 'align' cache mode crashes vLLM 0.32 on CPU, reported as a finding, not hidden).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kvdoctor._exceptions import FlagError, InputError
from kvdoctor.consistency import scenarios
from kvdoctor.consistency.deploy import DEVICES, Deployment, Enabler
from kvdoctor.consistency.servers import load_part
from kvdoctor.consistency.shrink import small_mamba_state
from kvdoctor.consistency.workload import Workload
from kvdoctor.core import faults as registry
from kvdoctor.core.config import ModelConfig, parse_config
from kvdoctor.core.faults import Needs, Target
from kvdoctor.core.launch_line import scan
from kvdoctor.core.paths import DEFAULT_SCENARIO
from kvdoctor.core.servers import Server
from kvdoctor.core.vllm.analysis import VllmAnalysis, analyze_vllm_config
from kvdoctor.core.vllm.flags import VLLM, owned_word, parse_vllm_flags
from kvdoctor.core.vllm.grouping import Group
from kvdoctor.core.vllm.specs import ModelSpecs, SpecKind, build_specs
from kvdoctor.deploy import plan
from kvdoctor.engines.vllm.server_plugin import INJECT_ENV, LOG_ENV

SERVER = "vllm"
LAUNCHER = "python -m vllm.entrypoints.openai.api_server"
HEALTH = "/health"
SERVED_NAME = "kvdoctor"  # --served-model-name: what the client's requests name as their model
CPU_BLOCK_SIZE = 32  # CPUAttentionBackend.get_supported_kernel_block_sizes: MultipleOf(32)
CPU_KVCACHE_GIB = "1"  # VLLM_CPU_KVCACHE_SPACE: the pools below are a few MiB for a shrunk model
ROOMY_FACTOR = 4
ROOMY_MIN_BLOCKS = 64
PRESSURE_SHARE = 4  # the pressured pool holds a quarter of the concurrent demand (as SGLang's quarter of peak)
PLUGIN_LOG = "vllm-plugin.log"  # what kvdoctor's vLLM plugin (kvdoctor.engines.vllm.server_plugin) recorded
# vLLM 0.32 model_executor/models/config.py, MambaModelConfig.verify_and_update_config (lines 685-707): prefix
# caching on sets mamba_cache_mode 'align' (mamba_block_size = block_size), off sets 'none' (max_model_len).
MAMBA_CACHE_MODE_WHERE = "model_executor/models/config.py:685-707 (MambaModelConfig.verify_and_update_config)"
# Flags the plan decides; after -- they would change what is compared.
OWNED_FLAGS = {
    "--num-gpu-blocks-override": "kvdoctor sizes both pools (reference roomy, pressured tight)",
    "--model": "the model is the positional MODEL (its random checkpoint when it has no weights)",
    "--load-format": "dummy weights give degenerate output; kvdoctor writes a seeded checkpoint",
    "--max-num-seqs": "the workload's --concurrency decides it",
    "--seed": "both deployments run with --seed 0",
    "--port": "kvdoctor picks free ports",
    "--host": "kvdoctor binds both servers to 127.0.0.1, where its client and health checks go",
    "--served-model-name": "kvdoctor's client names the model it serves",
    # vLLM puts a config file's flags first (utils/argparse_utils.py, _pull_args_from_config): it could set any of these
    "--config": "a config file may set a flag kvdoctor owns, and kvdoctor does not read it: give its flags after --",
}


# The flags a scenario decides, refused after -- by its part's check (kept here beside OWNED_FLAGS: the vLLM engine
# suite holds every table of owned flags to vLLM's parser in an environment without the run's client).
# --scenario prefix-cache: the reference without prefix caching, the subject with it, both with per-request cached
# tokens.
SCENARIO_FLAGS = {
    "--enable-prefix-caching": "the scenario turns prefix caching on for the subject, off for the reference",
    "--no-enable-prefix-caching": "the scenario turns prefix caching on for the subject, off for the reference",
    "--enable-prompt-tokens-details": "the scenario asks both servers for each reply's cached tokens",
    "--no-enable-prompt-tokens-details": "the scenario asks both servers for each reply's cached tokens",
}
# --scenario offload: the connector on the pressured server only, its CPU tier sized by kvdoctor.
OFFLOAD_FLAGS = {
    "--kv-offloading-size": "the scenario sizes the pressured server's CPU tier (the reference has none)",
    "--kv-offloading-backend": "the scenario uses vLLM's native OffloadingConnector on the pressured server",
    "--kv-transfer-config": "the scenario's connector is the OffloadingConnector --kv-offloading-size selects",
}


@dataclass(frozen=True)
class VllmDeployOptions:
    model_dir: str
    device: str
    workload: Workload
    config: Mapping[str, object]  # the (shrunk) config the checkpoint is built from: the pool sizing reads it
    source: str
    host: str = "127.0.0.1"
    extra_args: tuple[str, ...] = ()
    subject_args: tuple[str, ...] = ()  # the pressured server's alone (a sweep's configuration)
    inject: str | None = None
    plugin_log: str | None = None
    log_env: Mapping[str, str] = field(default_factory=dict)
    shrunk: bool = False  # CONFIG is --shrink's (server="vllm"): its small Mamba state is named as an enabler
    scenario: str = DEFAULT_SCENARIO  # a name of SCENARIOS (the run's part plans what it changes)


@dataclass(frozen=True)
class Pools:
    """Both pools in vLLM blocks, and what they were sized from."""

    reference_blocks: int
    pressured_blocks: int
    per_request_blocks: int
    block_size: int
    groups: tuple[str, ...]  # one line per KV cache group

    def tokens(self, blocks: int) -> int:
        return blocks * self.block_size


def check_extra_args(args: Sequence[str], owned: Mapping[str, str] = OWNED_FLAGS, what: str = "") -> None:
    """vLLM flags after ``--`` (vLLM's spellings, abbreviations resolved as vLLM's parser would; an SGLang-only
    flag is refused naming the server); one vLLM reads as a flag in OWNED (flag -> why: itself, an alias or
    inverse, a unique prefix, underscores for dashes; ``kvdoctor.core.owned_flags``) is refused, WHAT saying with
    what."""
    try:
        found = scan(args, VLLM)
    except FlagError as exc:
        raise InputError(f"--server vllm: {exc} (flags after -- go to vLLM)") from None
    if found.positionals:
        raise InputError(
            f"unexpected argument {found.positionals[0]!r} among the vLLM flags after --: vLLM's parser takes a "
            "word that is no flag's value as its model_tag, and kvdoctor sets the model (--model)"
        )
    hit = owned_word(args, owned)
    if hit is not None:
        raise InputError(f"{hit.typed} after -- is not allowed{what}{hit.reading('vLLM')}: {owned[hit.flag]}")


LIVE = {"server": Server.VLLM, "target": Target.SERVER}  # the registry's records of the faults vLLM's plugin does
# One line per scenario vLLM runs: its part (kvdoctor.consistency.servers.vllm.part).
SCENARIOS: dict[str, str] = {
    "preempt": "kvdoctor.consistency.servers.vllm.preempt:PART",
    "prefix-cache": "kvdoctor.consistency.servers.vllm.prefix_cache:PART",
    "offload": "kvdoctor.consistency.servers.vllm.offload:PART",
}


class PlanPart(Protocol):
    """What the plan asks the run's part of a scenario (:class:`kvdoctor.consistency.servers.vllm.part.VllmPart`)."""

    preset: str  # the plan's preset name (what --dry-run and pd-eval's launch plan call it)

    def check(self, o: VllmDeployOptions) -> None:
        """What the scenario cannot run here, refused before launch (exit 2)."""

    def needs(self, name: str, scenario: str) -> str | None: ...

    def refuses(self, name: str) -> str | None: ...

    def cache_flags(self, o: VllmDeployOptions, role: str) -> tuple[str, ...]:
        """ROLE's prefix-caching flags."""

    def subject_flags(self, o: VllmDeployOptions) -> tuple[str, ...]:
        """Flags the subject (role ``pressured``) adds before ``--enforce-eager``."""

    def subject_env(self, o: VllmDeployOptions) -> dict[str, str]:
        """Environment the subject adds."""

    def served(self, o: VllmDeployOptions) -> Workload:
        """The workload as the servers get it."""

    def pools(
        self, o: VllmDeployOptions, a: VllmAnalysis, groups: Sequence[Group], per_request: int
    ) -> tuple[int, int]:
        """(reference, pressured) blocks, from the subject's analysis A, its GROUPS and the blocks one request
        holds across them (PER_REQUEST)."""

    def enablers(self, o: VllmDeployOptions) -> list[Enabler]:
        """The scenario's enablers (after the CPU's)."""


def part(scenario: str) -> PlanPart:
    """vLLM's part of SCENARIO (KeyError for one vLLM does not run: prepare refuses it first)."""
    found: PlanPart = load_part(SCENARIOS[scenario])
    return found


def live_fault(name: str) -> registry.Fault | None:
    """NAME's record among the faults vLLM's plugin does (an old spelling stands for its fault); None: not one."""
    try:
        return registry.get(name, **LIVE)
    except KeyError:
        return None


def check_fault(name: str, *, has_recurrent: bool, scenario: str = DEFAULT_SCENARIO) -> None:
    fault = live_fault(name)
    if fault is None:
        raise InputError(
            f"--inject {name} is not a vLLM fault (--server vllm): choose one of {', '.join(registry.names(**LIVE))} "
            "(the SGLang faults patch SGLang's own code)"
        )
    if fault.needs is Needs.RECURRENT and not has_recurrent:
        raise InputError(f"--inject {name} needs a model with recurrent state (a Mamba hybrid)")
    scenarios.check_fault(scenario, name, fault.path, SCENARIOS, part)


def check_scenario(o: VllmDeployOptions) -> None:
    """What the run's scenario cannot run here, refused before launch."""
    part(o.scenario).check(o)


def planned(o: VllmDeployOptions) -> tuple[VllmAnalysis, Sequence[Group]]:
    """The subject's analysis and KV cache groups from kvdoctor's vLLM grouping model (vLLM's refusal, if it
    would refuse)."""
    a = analysis(o, _server_flags(o))
    if a.groups is None:
        raise InputError(f"vLLM would not start with this model and these flags: {a.refusal} ({a.refusal_where})")
    return a, a.groups


SUBJECT = "pressured"  # the role whose server is under test (prefix-cache: the one with prefix caching on)


def _flags(o: VllmDeployOptions, role: str = SUBJECT) -> tuple[str, ...]:
    """The flags ROLE's server gets besides the pool (the sizing model reads the subject's): the same for both, but
    what the scenario's part changes (its prefix-caching flags per role, the subject's own flags just before
    ``--enforce-eager``)."""
    out = list(base_flags(o, role))
    if role == SUBJECT:
        at = out.index("--enforce-eager")
        out[at:at] = part(o.scenario).subject_flags(o)
    return tuple(out)


def base_flags(o: VllmDeployOptions, role: str) -> tuple[str, ...]:
    """ROLE's flags without the subject's own: the CPU's, the scenario's prefix caching, ``--enforce-eager``."""
    out: list[str] = []
    if o.device == "cpu":
        out += ["--dtype", "float32", "--block-size", str(CPU_BLOCK_SIZE)]
    out += part(o.scenario).cache_flags(o, role)
    return (*out, "--enforce-eager")


def mamba_cache_mode(o: VllmDeployOptions, role: str) -> str | None:
    """vLLM's mamba cache mode on ROLE's server (None: the model has no Mamba layers)."""
    if not has_mamba(o):
        return None
    return "none" if "--no-enable-prefix-caching" in _flags(o, role) else "align"


def _config(o: VllmDeployOptions) -> ModelConfig:
    return parse_config(json.dumps(dict(o.config)), o.source)


def analysis(o: VllmDeployOptions, flags: Sequence[str]) -> VllmAnalysis:
    """kvdoctor's vLLM model of the servers' KV cache for O's model and FLAGS."""
    return analyze_vllm_config(_config(o), parse_vllm_flags(flags))


def specs(o: VllmDeployOptions) -> ModelSpecs:
    """The model's layer specs under the flags after ``--``."""
    return build_specs(_config(o), parse_vllm_flags(o.extra_args))


def has_mamba(o: VllmDeployOptions) -> bool:
    return specs(o).has_mamba


def block_size(o: VllmDeployOptions) -> int:
    """The subject's attention block in tokens, from the sizing model (a prefix is a whole number of them)."""
    a = analysis(o, (*_flags(o), *o.extra_args))
    if a.groups is None:
        raise InputError(f"vLLM would not start with this model and these flags: {a.refusal} ({a.refusal_where})")
    return a.specs.block_size


def served(o: VllmDeployOptions) -> Workload:
    """The workload as the servers get it (the scenario's part says: prefix-cache's prompts carry a prefix too)."""
    return part(o.scenario).served(o)


def model_len(w: Workload) -> int:
    """``--max-model-len``: the request's tokens, rounded up to a multiple of 32 (without prefix caching a Mamba
    state block is max_model_len long, so it is kept small; vLLM refuses a pool smaller than one such request)."""
    return math.ceil(w.per_request_tokens / CPU_BLOCK_SIZE) * CPU_BLOCK_SIZE


def _server_flags(o: VllmDeployOptions) -> tuple[str, ...]:
    """The flags the sizing model reads, as the (subject) server gets them (the pool flag aside)."""
    return (*_flags(o), "--max-model-len", str(model_len(served(o))), *o.extra_args)


def pools(o: VllmDeployOptions) -> Pools:
    """(reference, pressured) ``--num-gpu-blocks-override`` from kvdoctor's vLLM grouping model, as the scenario's
    part sizes them from the blocks one request holds (preempt's: :func:`pressure_pools`)."""
    a, groups = planned(o)
    tokens = served(o).per_request_tokens
    per_request = 0
    lines = []
    for i, g in enumerate(groups):
        blocks = request_blocks(g, tokens)
        per_request += blocks
        lines.append(
            f"group {i}: {g.kind.value}, block {g.spec.block_size} tokens, {len(g.layer_names)} layers, "
            f"{blocks}/request"
        )
    reference, pressured = part(o.scenario).pools(o, a, groups, per_request)
    return Pools(reference, pressured, per_request, a.specs.block_size, tuple(lines))


def pressure_pools(o: VllmDeployOptions, a: VllmAnalysis, groups: Sequence[Group], per_request: int) -> tuple[int, int]:
    """(roomy, tight) blocks: the pressured pool a quarter of the concurrent demand (vLLM must preempt), the
    reference's :data:`ROOMY_FACTOR` times it; refused (exit 2) for a workload vLLM would never preempt."""
    if not _grows(groups, o.workload):
        bs = a.specs.block_size
        w = o.workload
        raise InputError(
            f"vLLM cannot preempt this workload: its attention blocks are {bs} tokens here "
            f"({a.specs.block_size_reason}), so a request of {w.prompt_tokens} + {w.max_new_tokens} tokens never "
            "needs a new block while it decodes and vLLM only queues requests, it never preempts one; make "
            f"--prompt-tokens + --max-new-tokens cross a block boundary (e.g. --max-new-tokens {bs})"
        )
    demand = o.workload.in_flight * per_request
    tight = max(per_request + 1, math.ceil(demand / PRESSURE_SHARE))
    roomy = max(ROOMY_MIN_BLOCKS, ROOMY_FACTOR * demand)
    return roomy, tight


def request_blocks(g: Group, tokens: int) -> int:
    """The blocks a request of TOKENS tokens holds in group G: a full-attention group one per block of tokens, a
    sliding-window group at most its window's (+ 1), a Mamba group one state block."""
    bs = g.spec.block_size
    if g.kind is SpecKind.MAMBA:
        return 1
    if g.spec.sliding_window:
        return min(math.ceil(tokens / bs), math.ceil(g.spec.sliding_window / bs) + 1)
    return math.ceil(tokens / bs)


def _grows(groups: Sequence[Group], w: Workload) -> bool:
    """Whether a running request needs a new block while it decodes (vLLM preempts only then: a request whose
    prompt blocks cannot be allocated waits in the queue)."""
    for g in groups:
        if g.kind is SpecKind.MAMBA:
            continue
        bs = g.spec.block_size
        cap = math.ceil(g.spec.sliding_window / bs) + 1 if g.spec.sliding_window else None
        prompt, total = math.ceil(w.prompt_tokens / bs), math.ceil(w.per_request_tokens / bs)
        if min(total, cap or total) > min(prompt, cap or prompt):
            return True
    return False


# A Mamba hybrid served without prefix caching where the scenario does not need it (preempt, offload).
NO_PREFIX_CACHING = Enabler(
    "--no-enable-prefix-caching",
    "every server",
    "with prefix caching a Mamba hybrid runs mamba cache mode 'align', which crashes vLLM 0.32 on CPU "
    "(IndexError in model_executor/layers/mamba/mamba_mixer2.py); a finding about vLLM",
)


def enablers(o: VllmDeployOptions) -> tuple[Enabler, ...]:
    out: list[Enabler] = []
    if o.device == "cpu":
        out += [
            Enabler(
                f"VLLM_CPU_KVCACHE_SPACE={CPU_KVCACHE_GIB}",
                "every server",
                "the CPU worker's KV space in GiB (its default takes a share of the machine's memory)",
            ),
            Enabler(
                f"--dtype float32 --block-size {CPU_BLOCK_SIZE}",
                "every server",
                "vLLM's CPU attention takes block sizes in multiples of 32 (v1/attention/backends/cpu_attn.py, "
                "get_supported_kernel_block_sizes); float32 keeps near-tied random-weight logits from flipping",
            ),
        ]
    out += part(o.scenario).enablers(o)
    out += _small_state(o)
    out += [
        Enabler("--enforce-eager", "every server", "no graph capture (start-up minutes shorter on a CPU)"),
        Enabler("HF_HUB_OFFLINE=1", "every server", "the checkpoint and its tokenizer are local"),
    ]
    return tuple(out)


def _small_state(o: VllmDeployOptions) -> list[Enabler]:
    """``--shrink``'s vLLM Mamba state, with the attention block it leaves (from the sizing model)."""
    state = {k: o.config[k] for k in small_mamba_state(o.config)}
    if not (o.shrunk and state and has_mamba(o)):
        return []
    a = analysis(o, _server_flags(o))
    mamba = next(s for s in a.specs.layers.values() if s.kind is SpecKind.MAMBA)
    size = f"{mamba.unpadded_page_size_bytes:,} B"
    return [
        Enabler(
            f"--shrink Mamba state: {state['mamba_num_heads']} heads x {state['mamba_head_dim']} x "
            f"{state['ssm_state_size']}, {state['n_groups']} group",
            "the checkpoint",
            "vLLM raises its attention block until one attention page holds a Mamba state "
            "(platforms/interface.py, Platform._align_hybrid_block_size); the full-size state padded a shrunk "
            "NemotronH's blocks to 8,448 tokens, which a short request never outgrows, so vLLM only queued; "
            f"this state ({size}) leaves attention blocks of {a.specs.block_size} tokens, which decode outgrows",
        )
    ]


def _env(o: VllmDeployOptions, *, pressured: bool) -> dict[str, str]:
    env: dict[str, str] = {"HF_HUB_OFFLINE": "1", **o.log_env}
    if o.device == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = CPU_KVCACHE_GIB
    if o.plugin_log:
        env[LOG_ENV] = o.plugin_log
    if pressured and o.inject:
        env[INJECT_ENV] = o.inject
    if pressured:
        env |= part(o.scenario).subject_env(o)
    return env


def build(o: VllmDeployOptions, ports: Sequence[int]) -> Deployment:
    """The plan on two free PORTS: reference and pressured vLLM servers."""
    if o.device not in DEVICES:
        raise InputError(f"--device must be one of {', '.join(DEVICES)}, got {o.device!r}")
    check_extra_args(o.extra_args)
    check_extra_args(o.subject_args)
    if o.inject:
        check_fault(o.inject, has_recurrent=has_mamba(o), scenario=o.scenario)
    check_scenario(o)
    sized = pools(o)
    launcher = plan.split_command("--launcher", LAUNCHER)
    steps = []
    for role, blocks, port in (
        ("reference", sized.reference_blocks, ports[0]),
        ("pressured", sized.pressured_blocks, ports[1]),
    ):
        argv = (
            *launcher,
            "--model",
            o.model_dir,
            *_flags(o, role),
            "--max-model-len",
            str(model_len(served(o))),
            "--max-num-seqs",
            str(o.workload.in_flight),
            "--num-gpu-blocks-override",
            str(blocks),
            "--seed",
            "0",
            "--served-model-name",
            SERVED_NAME,
            *o.extra_args,
            *(o.subject_args if role == "pressured" else ()),
            "--host",
            o.host,
            "--port",
            str(port),
        )
        steps.append(plan.Step(role, argv, plan.base_url(o.host, port), HEALTH, _env(o, pressured=role == "pressured")))
    ref, press = steps
    return Deployment(
        "single",
        tuple(steps),
        ref.url,
        press.url,
        ref.url,
        press.url,
        sized.tokens(sized.reference_blocks),
        sized.tokens(sized.pressured_blocks),
        enablers(o),
        injected_role="pressured" if o.inject else None,
        preset=part(o.scenario).preset,
    )
