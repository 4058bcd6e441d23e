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

``--scenario prefix-cache`` (:mod:`kvdoctor.consistency.prefix`) plans the same two servers at one pool (the
concurrent demand and one request spare, so nothing preempts, or, where larger, every block the fill and hit
phases allocate, so no prefix is evicted before it is hit: :func:`kvdoctor.consistency.prefix.pool_blocks`) with
their prefix caching the only difference: the
reference ``--no-enable-prefix-caching`` (every token computed), the subject (role ``pressured``)
``--enable-prefix-caching``; both ``--enable-prompt-tokens-details`` (each reply's ``usage`` says its cached
tokens). A Mamba hybrid then gets vLLM's mamba cache mode 'align' on the subject and 'none' on the reference
(``MambaModelConfig.verify_and_update_config``); a Mamba2 hybrid on a CPU is refused before launch with the
finding (:data:`MAMBA2_PREFIX_CPU_FINDING`).

``--scenario offload`` plans preempt's two servers (the same pools: roomy reference, pressured tight) and adds
vLLM's OffloadingConnector to the pressured one only (``--kv-offloading-size GiB --kv-offloading-backend native``:
``VllmConfig._post_init_kv_transfer_config``, config/vllm.py:1099-1123; config/cache.py:266-275), its CPU tier sized
(:func:`offload_gib`) to hold every in-flight request's blocks twice over, so a request resumed from preemption
finds its blocks there and loads them instead of recomputing; proven by ``vllm:kv_offload_load_bytes``. vLLM
refuses the connector on a CPU at start-up, so ``--device cpu`` is refused before launch with vLLM's message
(:data:`OFFLOAD_CPU_FINDING`); on a GPU it is planned, not measured.

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
from typing import TYPE_CHECKING

from kvdoctor._exceptions import FlagError, InputError
from kvdoctor.consistency import prefix
from kvdoctor.consistency.deploy import DEVICES, Deployment, Enabler
from kvdoctor.consistency.workload import Workload
from kvdoctor.core import faults as registry
from kvdoctor.core.faults import Needs, StatePath, Target
from kvdoctor.core.servers import Server
from kvdoctor.deploy import plan
from kvdoctor.engines.vllm.server_plugin import INJECT_ENV, LOG_ENV

if TYPE_CHECKING:
    from kvdoctor.core.config import ModelConfig
    from kvdoctor.core.vllm.analysis import VllmAnalysis
    from kvdoctor.core.vllm.grouping import Group
    from kvdoctor.core.vllm.specs import ModelSpecs

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
# Measured (vllm-cpu 0.32.0, 2-core CPU): a shrunk NemotronH (--shrink --server vllm) with prefix caching on, the
# first 160-token prompt killed the engine; GraniteMoeHybrid the same with 200-token prompts (issue 19).
MAMBA2_PREFIX_CPU_FINDING = (
    "IndexError: index 1 is out of bounds for dimension 0 with size 1 at "
    "model_executor/layers/mamba/mamba_mixer2.py:880 (conv_ssm_forward: varlen_states[last_chunk_indices_p])"
)
# vLLM 0.32 v1/kv_offload/cpu/spec.py:196-207 (0.33: 217-228), CPUOffloadingSpec.get_worker, at the worker's
# start-up: the OffloadingConnector's CPU tier needs a CUDA-alike or XPU platform.
OFFLOAD_CPU_MESSAGE = "CPU Offloading is currently only supported on CUDA-alike and XPU GPUs"
OFFLOAD_CPU_WHERE = "vLLM 0.32 v1/kv_offload/cpu/spec.py:196-207, CPUOffloadingSpec.get_worker; 0.33: 217-228"
OFFLOAD_CPU_FINDING = (
    f"--scenario offload cannot run on a CPU: vLLM's OffloadingConnector refuses it at start-up with "
    f'"{OFFLOAD_CPU_MESSAGE}" ({OFFLOAD_CPU_WHERE}); a finding about vLLM on CPU (not kvdoctor\'s; a GPU is not '
    "measured): run it with --device cuda, or --scenario preempt (recompute on resume)"
)
OFFLOAD_HEADROOM = 2  # the CPU tier holds every in-flight request's blocks this many times over
OFFLOAD_STEP_GIB = 0.01  # --kv-offloading-size is rounded up to this
# Flags --scenario offload decides (the connector on the pressured server only, its CPU tier sized by kvdoctor).
OFFLOAD_FLAGS = {
    "--kv-offloading-size": "the scenario sizes the pressured server's CPU tier (the reference has none)",
    "--kv-offloading-backend": "the scenario uses vLLM's native OffloadingConnector on the pressured server",
    "--kv-transfer-config": "the scenario's connector is the OffloadingConnector --kv-offloading-size selects",
}
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
# Flags --scenario prefix-cache decides (the reference without prefix caching, the subject with it, both with
# per-request cached tokens).
SCENARIO_FLAGS = {
    "--enable-prefix-caching": "the scenario turns prefix caching on for the subject, off for the reference",
    "--no-enable-prefix-caching": "the scenario turns prefix caching on for the subject, off for the reference",
    "--enable-prompt-tokens-details": "the scenario asks both servers for each reply's cached tokens",
    "--no-enable-prompt-tokens-details": "the scenario asks both servers for each reply's cached tokens",
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
    inject: str | None = None
    plugin_log: str | None = None
    log_env: Mapping[str, str] = field(default_factory=dict)
    shrunk: bool = False  # CONFIG is --shrink's (server="vllm"): its small Mamba state is named as an enabler
    scenario: str = prefix.PREEMPT  # preempt, prefix-cache or offload (kvdoctor.consistency.prefix)


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
    from kvdoctor.core.launch_line import scan
    from kvdoctor.core.vllm.flags import VLLM, owned_word

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
# The scenario a fault's state path runs in, and how a refusal names that path.
PATH_SCENARIOS: dict[StatePath, tuple[str, str]] = {
    StatePath.PREFIX_HIT: (prefix.PREFIX_CACHE, "a prefix-cache hit"),
    StatePath.OFFLOAD: (prefix.OFFLOAD, "a load from the OffloadingConnector's CPU tier"),
    StatePath.PREEMPTION: (prefix.PREEMPT, "a request resumed from preemption"),
}


def live_fault(name: str) -> registry.Fault | None:
    """NAME's record among the faults vLLM's plugin does (an old spelling stands for its fault); None: not one."""
    try:
        return registry.get(name, **LIVE)
    except KeyError:
        return None


def check_fault(name: str, *, has_recurrent: bool, scenario: str = prefix.PREEMPT) -> None:
    fault = live_fault(name)
    if fault is None:
        raise InputError(
            f"--inject {name} is not a vLLM fault (--server vllm): choose one of {', '.join(registry.names(**LIVE))} "
            "(the SGLang faults patch SGLang's own code)"
        )
    if fault.needs is Needs.RECURRENT and not has_recurrent:
        raise InputError(f"--inject {name} needs a model with recurrent state (a Mamba hybrid)")
    wanted, what = PATH_SCENARIOS[fault.path]
    if scenario != wanted:
        raise InputError(
            f"--inject {name} acts on {what}: it needs --scenario {wanted} (this run is --scenario {scenario})"
        )


def check_scenario(o: VllmDeployOptions) -> None:
    """What a scenario cannot run here, refused before launch."""
    from kvdoctor.core.vllm.rules import MAMBA2_FAMILIES
    from kvdoctor.core.vllm.specs import SpecKind

    if o.scenario == prefix.OFFLOAD:
        check_extra_args(o.extra_args, OFFLOAD_FLAGS, " with --scenario offload")
        if o.device == "cpu":
            raise InputError(OFFLOAD_CPU_FINDING)
        return
    if o.scenario != prefix.PREFIX_CACHE:
        return
    check_extra_args(o.extra_args, SCENARIO_FLAGS, " with --scenario prefix-cache")
    fault = live_fault(o.inject) if o.inject else None
    if (
        fault is not None and fault.path is StatePath.PREFIX_HIT
    ):  # every spec kind but Mamba is one of vLLM's AttentionSpec subclasses
        kinds = [g.kind for g in _planned(o)[1]]
        if all(k is SpecKind.MAMBA for k in kinds):
            raise InputError(
                f"--inject {o.inject} zeroes the attention KV blocks a request reads from the prefix cache, and "
                f"vLLM plans no attention group for this model ({', '.join(sorted({k.value for k in kinds}))} "
                "only): it would fire on nothing"
            )
    if o.device != "cpu":
        return
    specs = _specs(o)
    if specs.has_mamba and specs.family in MAMBA2_FAMILIES:
        raise InputError(
            f"--scenario prefix-cache cannot run a Mamba2 hybrid on a CPU: with prefix caching on vLLM 0.32 serves "
            f"it in mamba cache mode 'align' ({MAMBA_CACHE_MODE_WHERE}) and its CPU path crashes on the first "
            f"prompt: {MAMBA2_PREFIX_CPU_FINDING}; a finding about vLLM on CPU (not kvdoctor's; a GPU is not "
            "measured): run it with --device cuda, or --scenario preempt (served without prefix caching)"
        )


def _planned(o: VllmDeployOptions) -> tuple[VllmAnalysis, Sequence[Group]]:
    """The subject's analysis and KV cache groups from kvdoctor's vLLM grouping model (vLLM's refusal, if it
    would refuse)."""
    a = _analysis(o, _server_flags(o))
    if a.groups is None:
        raise InputError(f"vLLM would not start with this model and these flags: {a.refusal} ({a.refusal_where})")
    return a, a.groups


SUBJECT = "pressured"  # the role whose server is under test (prefix-cache: the one with prefix caching on)
OFFLOAD_TRANSFER_CONFIG = json.dumps({"kv_connector_extra_config": {"offload_prompt_only": False}})


def _flags(o: VllmDeployOptions, role: str = SUBJECT) -> tuple[str, ...]:
    """The flags ROLE's server gets besides the pool (the sizing model reads the subject's). Preempt: the same
    for both; prefix-cache: the reference computes every token, the subject caches prefixes; offload: the subject
    adds the OffloadingConnector."""
    out = list(_base_flags(o, role))
    if o.scenario == prefix.OFFLOAD and role == SUBJECT:
        at = out.index("--enforce-eager")  # the connector's flags just before it, the rest as preempt's
        # offload_prompt_only defaults to True (v1/kv_offload/base.py:620-622): decode KV would never reach the CPU
        # tier; vLLM merges this extra config with --kv-offloading-size's connector (config/vllm.py:1099-1123).
        out[at:at] = [
            "--kv-offloading-size",
            offload_gib(o),
            "--kv-offloading-backend",
            "native",
            "--kv-transfer-config",
            OFFLOAD_TRANSFER_CONFIG,
        ]
    return tuple(out)


def _base_flags(o: VllmDeployOptions, role: str) -> tuple[str, ...]:
    out: list[str] = []
    if o.device == "cpu":
        out += ["--dtype", "float32", "--block-size", str(CPU_BLOCK_SIZE)]
    if o.scenario == prefix.PREFIX_CACHE:
        out.append("--enable-prefix-caching" if role == SUBJECT else "--no-enable-prefix-caching")
        out.append("--enable-prompt-tokens-details")
    elif _has_mamba(o) or o.scenario == prefix.OFFLOAD:
        # offload: the GPU prefix cache is asked before the connector, and a preempted request's prompt blocks,
        # freed last, would mostly be found there: no load from the CPU tier (both servers, for symmetry).
        out.append("--no-enable-prefix-caching")
    return (*out, "--enforce-eager")


def mamba_cache_mode(o: VllmDeployOptions, role: str) -> str | None:
    """vLLM's mamba cache mode on ROLE's server (None: the model has no Mamba layers)."""
    if not _has_mamba(o):
        return None
    return "none" if "--no-enable-prefix-caching" in _flags(o, role) else "align"


def offload_gib(o: VllmDeployOptions) -> str:
    """``--kv-offloading-size`` for the pressured server: every in-flight request's blocks (every group's layers'
    pages, from the sizing model without the connector) :data:`OFFLOAD_HEADROOM` times over, in GiB rounded up to
    :data:`OFFLOAD_STEP_GIB`, so every preempted request's blocks fit in the CPU tier."""
    return f"{offload_bytes(o)[1] / (1 << 30):.2f}"


def offload_bytes(o: VllmDeployOptions) -> tuple[int, float]:
    """(bytes one request's blocks take in every group, the CPU tier's size in bytes as --kv-offloading-size says)."""
    a = _analysis(o, (*_base_flags(o, SUBJECT), "--max-model-len", str(model_len(o.workload)), *o.extra_args))
    if a.groups is None:
        raise InputError(f"vLLM would not start with this model and these flags: {a.refusal} ({a.refusal_where})")
    tokens = o.workload.per_request_tokens
    per_request = 0
    for g in a.groups:
        per_request += request_blocks(g, tokens) * g.spec.page_size_bytes * len(g.layer_names)
    need = OFFLOAD_HEADROOM * o.workload.in_flight * per_request
    steps = max(1, math.ceil(need / (OFFLOAD_STEP_GIB * (1 << 30))))
    return per_request, round(steps * OFFLOAD_STEP_GIB, 2) * (1 << 30)


def _config(o: VllmDeployOptions) -> ModelConfig:
    from kvdoctor.core.config import parse_config

    return parse_config(json.dumps(dict(o.config)), o.source)


def _analysis(o: VllmDeployOptions, flags: Sequence[str]) -> VllmAnalysis:
    from kvdoctor.core.vllm.analysis import analyze_vllm_config
    from kvdoctor.core.vllm.flags import parse_vllm_flags

    return analyze_vllm_config(_config(o), parse_vllm_flags(flags))


def _specs(o: VllmDeployOptions) -> ModelSpecs:
    from kvdoctor.core.vllm.flags import parse_vllm_flags
    from kvdoctor.core.vllm.specs import build_specs

    return build_specs(_config(o), parse_vllm_flags(o.extra_args))


def _has_mamba(o: VllmDeployOptions) -> bool:
    return _specs(o).has_mamba


def block_size(o: VllmDeployOptions) -> int:
    """The subject's attention block in tokens, from the sizing model (a prefix is a whole number of them)."""
    a = _analysis(o, (*_flags(o), *o.extra_args))
    if a.groups is None:
        raise InputError(f"vLLM would not start with this model and these flags: {a.refusal} ({a.refusal_where})")
    return a.specs.block_size


def served(o: VllmDeployOptions) -> Workload:
    """The workload as the servers get it (prefix-cache: each prompt carries its group's prefix too)."""
    return prefix.served(o.workload, block_size(o)) if o.scenario == prefix.PREFIX_CACHE else o.workload


def model_len(w: Workload) -> int:
    """``--max-model-len``: the request's tokens, rounded up to a multiple of 32 (without prefix caching a Mamba
    state block is max_model_len long, so it is kept small; vLLM refuses a pool smaller than one such request)."""
    return math.ceil(w.per_request_tokens / CPU_BLOCK_SIZE) * CPU_BLOCK_SIZE


def _server_flags(o: VllmDeployOptions) -> tuple[str, ...]:
    """The flags the sizing model reads, as the (subject) server gets them (the pool flag aside)."""
    return (*_flags(o), "--max-model-len", str(model_len(served(o))), *o.extra_args)


def pools(o: VllmDeployOptions) -> Pools:
    """(reference, pressured) ``--num-gpu-blocks-override`` from kvdoctor's vLLM grouping model."""
    from kvdoctor.core.vllm.specs import SpecKind

    a, groups = _planned(o)
    w = served(o)
    tokens = w.per_request_tokens
    per_request = 0
    shared = 0  # blocks a prefix-cache hit shares with the cached prefix (whole blocks of full-attention groups)
    lines = []
    for i, g in enumerate(groups):
        bs = g.spec.block_size
        blocks = request_blocks(g, tokens)
        per_request += blocks
        if g.kind in (SpecKind.FULL, SpecKind.MLA):  # a sliding window's or Mamba's blocks: counted unshared
            shared += min(blocks, prefix.prefix_tokens(a.specs.block_size) // bs)
        lines.append(f"group {i}: {g.kind.value}, block {bs} tokens, {len(g.layer_names)} layers, {blocks}/request")
    if o.scenario == prefix.PREFIX_CACHE:
        both = prefix.pool_blocks(o.workload, per_request, shared)
        return Pools(both, both, per_request, a.specs.block_size, tuple(lines))
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
    return Pools(roomy, tight, per_request, a.specs.block_size, tuple(lines))


def request_blocks(g: Group, tokens: int) -> int:
    """The blocks a request of TOKENS tokens holds in group G: a full-attention group one per block of tokens, a
    sliding-window group at most its window's (+ 1), a Mamba group one state block."""
    from kvdoctor.core.vllm.specs import SpecKind

    bs = g.spec.block_size
    if g.kind is SpecKind.MAMBA:
        return 1
    if g.spec.sliding_window:
        return min(math.ceil(tokens / bs), math.ceil(g.spec.sliding_window / bs) + 1)
    return math.ceil(tokens / bs)


def _grows(groups: Sequence[Group], w: Workload) -> bool:
    """Whether a running request needs a new block while it decodes (vLLM preempts only then: a request whose
    prompt blocks cannot be allocated waits in the queue)."""
    from kvdoctor.core.vllm.specs import SpecKind

    for g in groups:
        if g.kind is SpecKind.MAMBA:
            continue
        bs = g.spec.block_size
        cap = math.ceil(g.spec.sliding_window / bs) + 1 if g.spec.sliding_window else None
        prompt, total = math.ceil(w.prompt_tokens / bs), math.ceil(w.per_request_tokens / bs)
        if min(total, cap or total) > min(prompt, cap or prompt):
            return True
    return False


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
    if _has_mamba(o) and o.scenario != prefix.PREFIX_CACHE:
        out.append(
            Enabler(
                "--no-enable-prefix-caching",
                "every server",
                "with prefix caching a Mamba hybrid runs mamba cache mode 'align', which crashes vLLM 0.32 on CPU "
                "(IndexError in model_executor/layers/mamba/mamba_mixer2.py); a finding about vLLM",
            )
        )
    out += _small_state(o)
    out += [
        Enabler("--enforce-eager", "every server", "no graph capture (start-up minutes shorter on a CPU)"),
        Enabler("HF_HUB_OFFLINE=1", "every server", "the checkpoint and its tokenizer are local"),
    ]
    return tuple(out)


def _small_state(o: VllmDeployOptions) -> list[Enabler]:
    """``--shrink``'s vLLM Mamba state, with the attention block it leaves (from the sizing model)."""
    from kvdoctor.consistency.shrink import small_mamba_state
    from kvdoctor.core.vllm.specs import SpecKind

    state = {k: o.config[k] for k in small_mamba_state(o.config)}
    if not (o.shrunk and state and _has_mamba(o)):
        return []
    a = _analysis(o, _server_flags(o))
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
    if pressured and o.scenario == prefix.OFFLOAD:
        env["VLLM_USE_SIMPLE_KV_OFFLOAD"] = "0"  # else config/vllm.py:1116 picks SimpleCPUOffloadConnector
    return env


def build(o: VllmDeployOptions, ports: Sequence[int]) -> Deployment:
    """The plan on two free PORTS: reference and pressured vLLM servers."""
    if o.device not in DEVICES:
        raise InputError(f"--device must be one of {', '.join(DEVICES)}, got {o.device!r}")
    check_extra_args(o.extra_args)
    if o.inject:
        check_fault(o.inject, has_recurrent=_has_mamba(o), scenario=o.scenario)
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
        preset="consistency-vllm" if o.scenario == prefix.PREEMPT else f"consistency-vllm-{o.scenario}",
    )
