"""vLLM's hazards (KVD1xx), registered into the one registry of both servers (``kvdoctor.core.registry``).

Each rule looks at one ``VllmContext`` (specs, groups, hybrid manager, connector verdict, flags) and
says what goes wrong and what to change. Each code is one :class:`~kvdoctor.core.registry.Rule` record
below; codes are stable, CI may grep for them.
"""

from __future__ import annotations

from collections.abc import Iterator

from kvdoctor.core import registry
from kvdoctor.core.cite import Cite
from kvdoctor.core.record import record
from kvdoctor.core.registry import ERROR, INFO, WARNING, Hazard, Rule
from kvdoctor.core.vllm import rules
from kvdoctor.core.vllm.connectors import ConnectorVerdict, HybridManager, Status
from kvdoctor.core.vllm.flags import VllmFlags
from kvdoctor.core.vllm.grouping import Group
from kvdoctor.core.vllm.refusals import VllmRefusal
from kvdoctor.core.vllm.specs import ModelSpecs, SpecKind

SERVER = "vllm"

VLLM_REFUSES = Rule(
    SERVER,
    "KVD114-VLLM-REFUSES",
    (ERROR,),
    "vLLM 0.33.0 refuses this launch at start-up (its counterpart of KVD014): `--tensor-parallel-size` that does "
    "not divide the attention heads (`ModelConfig.verify_with_parallel_config`) or the KV heads "
    "(`QKVParallelLinear`), or KV cache groups it cannot plan; the message and `where` are vLLM's own; with "
    "`--engine vllm` also what the installed vLLM raises",
    (rules.TP_HEADS, rules.TP_KV_HEADS, rules.DIVIDE, rules.GROUPING),
)
CONNECTOR_NO_HYBRID = Rule(
    SERVER,
    "KVD101-CONNECTOR-NO-HYBRID",
    (ERROR, WARNING),
    "a connector without `SupportsHMA` turns the hybrid KV cache manager off: a model with recurrent state fails "
    "at start-up (error); sliding-window KV is kept at full length (warning)",
    (rules.HMA_OFF, rules.SUPPORTS_HMA, rules.PROMOTE),
)
STATE_NOT_CARRIED = Rule(
    SERVER,
    "KVD102-STATE-NOT-CARRIED",
    (ERROR,),
    "a group no configured path carries (a ring buffer under offload; a hybrid model offloaded without prefix "
    "caching; `LMCacheMPConnector` with several groups)",
    (rules.TRANSFER_GROUPS, rules.OFFLOAD_GROUPS, rules.OFFLOAD_PREFIX_CACHING, rules.LMCACHE_MP_ONE_GROUP),
)
BLOCK_SCALES_UNVERIFIED = Rule(
    SERVER,
    "KVD103-BLOCK-SCALES-UNVERIFIED",
    (WARNING,),
    "NVFP4 block scales packed in the KV pages travel with them, but no vLLM test verifies it",
    (rules.NVFP4_PACKING,),
)
PREEMPTION_RECOMPUTES = Rule(
    SERVER,
    "KVD104-PREEMPTION-RECOMPUTES",
    (INFO, WARNING),
    "vLLM preempts by recompute only; a warning when prefix caching is off and no connector is set",
    (rules.PREEMPT,),
)
HYBRID_MANAGER_CONFLICT = Rule(
    SERVER,
    "KVD105-HYBRID-MANAGER-CONFLICT",
    (ERROR,),
    "the hybrid manager explicitly on with a connector that lacks it: vLLM raises",
    (rules.HMA_OFF,),
)
EXTERNAL_CONNECTOR = Rule(
    SERVER,
    "KVD106-EXTERNAL-CONNECTOR",
    (WARNING,),
    "`kv_connector_module_path`: kvdoctor cannot tell what it carries",
    (rules.CONNECTOR_REGISTRY,),
)
FLAGS_NOT_MODELLED = Rule(SERVER, "KVD109-FLAGS-NOT-MODELLED", (INFO,), "vLLM flags accepted but not modelled")
# Emitted by the engine adapter (``kvdoctor.engines.vllm.inspect``), not by a check of this module.
VLLM_DRIFT = Rule(
    SERVER, "KVD115-VLLM-DRIFT", (ERROR,), "`--engine vllm`: vLLM's own answer differs from the rule model's"
)


@record(frozen=True)
class VllmContext:
    """Everything a vLLM hazard rule may look at."""

    flags: VllmFlags
    specs: ModelSpecs
    groups: tuple[Group, ...] | None  # None: vLLM refuses to plan the KV cache
    refusal: str | None
    hybrid: HybridManager
    connector: ConnectorVerdict
    refusals: tuple[VllmRefusal, ...] = ()  # start-up refusals of the launch (refusals.launch_refusals)
    refusal_where: Cite | None = None  # where vLLM raises while planning the KV cache (``refusal``)


def vllm_refuses(ctx: VllmContext) -> Iterator[Hazard]:
    """A launch vLLM itself refuses at start-up, with its own message and where it raises (SGLang's
    KVD014): a refusal of the parallel layout, or of planning the KV cache (the groups), which the
    reason hazards (KVD101, KVD105) explain but which is always reported as what it is."""
    for refusal in ctx.refusals:
        yield VLLM_REFUSES.hazard(
            f"vLLM {rules.VLLM_VERSION} refuses this launch at start-up: {refusal}",
            str(refusal.where),
        )
    if ctx.refusal is not None:
        where = f" ({ctx.refusal_where})" if ctx.refusal_where is not None else ""
        yield VLLM_REFUSES.hazard(
            f"vLLM {rules.VLLM_VERSION} refuses to plan the KV cache, so the server does not start: "
            f"{ctx.refusal}{where}",
            str(ctx.refusal_where) if ctx.refusal_where is not None else None,
        )


def connector_no_hybrid(ctx: VllmContext) -> Iterator[Hazard]:
    name = ctx.connector.name
    if ctx.connector.supports_hma is not False or not (ctx.specs.has_mamba or _has_kind(ctx, SpecKind.SLIDING)):
        return
    if ctx.specs.has_mamba:
        yield CONNECTOR_NO_HYBRID.hazard(
            f"{name} does not subclass SupportsHMA, so vLLM turns the hybrid KV cache manager off "
            f"({rules.HMA_OFF}); this model's recurrent (Mamba/GDN) state then cannot be grouped and vLLM "
            "fails at start-up. Use OffloadingConnector (--kv-offloading-size N), NixlConnector or "
            "MooncakeConnector.",
            severity=ERROR,
        )
    else:
        yield CONNECTOR_NO_HYBRID.hazard(
            f"{name} does not subclass SupportsHMA: the hybrid KV cache manager is off and sliding-window "
            "layers keep KV for every token (promoted to full attention): correct, but more memory and "
            "bytes moved.",
            severity=WARNING,
        )


def hybrid_explicit_conflict(ctx: VllmContext) -> Iterator[Hazard]:
    if ctx.hybrid.conflict:
        yield HYBRID_MANAGER_CONFLICT.hazard(
            f"--no-disable-hybrid-kv-cache-manager with {ctx.connector.name}, which lacks SupportsHMA: vLLM "
            f"raises at start-up ({rules.HMA_OFF}). Drop the flag or pick an HMA connector.",
        )


def state_not_carried(ctx: VllmContext) -> Iterator[Hazard]:
    if ctx.connector.name is None or (ctx.connector.supports_hma is False and ctx.specs.has_mamba):
        return  # no connector; or KVD101 already says it will not start
    lost = [r for r in ctx.connector.rows if r.status in (Status.LEFT, Status.REFUSED)]
    for row in lost:
        what = "all groups" if row.group < 0 else f"group {row.group} ({row.kind}, {row.layers} layers)"
        verb = "cannot start" if row.status is Status.REFUSED else "leaves it behind"
        yield STATE_NOT_CARRIED.hazard(
            f"{ctx.connector.name} {verb} for {what}: {row.reason} ({row.where}). A request restored "
            "through it resumes without that state.",
        )


def block_scales_unverified(ctx: VllmContext) -> Iterator[Hazard]:
    scaled = any(s.block_scaled for s in ctx.specs.layers.values())
    if scaled and ctx.connector.name is not None:
        yield BLOCK_SCALES_UNVERIFIED.hazard(
            f"--kv-cache-dtype {ctx.flags.kv_cache_dtype} packs FP8 block scales into each KV page "
            f"({rules.NVFP4_PACKING}); {ctx.connector.name} copies whole pages, so the scales travel with "
            "the payload, but no vLLM test verifies their transfer: check a restore bitwise "
            "(kvdoctor roundtrip) before trusting it.",
        )


def preemption_recomputes(ctx: VllmContext) -> Iterator[Hazard]:
    if ctx.connector.name is None and not ctx.flags.prefix_caching:
        yield PREEMPTION_RECOMPUTES.hazard(
            "vLLM preempts by recompute only and keeps no CPU backup "
            f"({rules.PREEMPT}); with prefix caching off and no connector, every preempted request "
            "recomputes its whole prompt and output.",
            severity=WARNING,
        )
    else:
        yield PREEMPTION_RECOMPUTES.hazard(
            f"vLLM preempts by recompute only ({rules.PREEMPT}): no backup is taken; a preempted request "
            "comes back through the prefix cache or a connector, never a CPU copy.",
            severity=INFO,
        )


def external_connector(ctx: VllmContext) -> Iterator[Hazard]:
    if ctx.connector.transfer is not None and ctx.connector.rule is None:
        yield EXTERNAL_CONNECTOR.hazard(
            f"{ctx.connector.name} is loaded from {ctx.connector.transfer.module_path}: kvdoctor cannot "
            "tell which groups it carries (use --engine vllm to ask the class itself).",
        )


def not_modelled(ctx: VllmContext) -> Iterator[Hazard]:
    if ctx.flags.not_modelled:
        yield FLAGS_NOT_MODELLED.hazard(
            f"vLLM flags accepted but not modelled: {' '.join(ctx.flags.not_modelled)}",
        )


def _has_kind(ctx: VllmContext, kind: SpecKind) -> bool:
    return any(s.kind is kind for s in ctx.specs.layers.values())


CHECKS = (
    vllm_refuses,
    connector_no_hybrid,
    hybrid_explicit_conflict,
    state_not_carried,
    block_scales_unverified,
    preemption_recomputes,
    external_connector,
    not_modelled,
)
registry.register(
    SERVER,
    (
        CONNECTOR_NO_HYBRID,
        STATE_NOT_CARRIED,
        BLOCK_SCALES_UNVERIFIED,
        PREEMPTION_RECOMPUTES,
        HYBRID_MANAGER_CONFLICT,
        EXTERNAL_CONNECTOR,
        FLAGS_NOT_MODELLED,
        VLLM_REFUSES,
        VLLM_DRIFT,
    ),
    CHECKS,
)
