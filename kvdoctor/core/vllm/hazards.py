"""vLLM hazards (KVD1xx): the same ``Hazard`` type, severities and registry as SGLang's (``core/sglang/hazards.py``).

Each rule looks at one ``VllmContext`` (specs, groups, hybrid manager, connector verdict, flags) and
says what goes wrong and what to change. Codes are stable; CI may grep for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from kvdoctor.core.sglang.hazards import ERROR, INFO, WARNING, Hazard
from kvdoctor.core.vllm import rules
from kvdoctor.core.vllm.connectors import ConnectorVerdict, HybridManager, Status
from kvdoctor.core.vllm.flags import VllmFlags
from kvdoctor.core.vllm.grouping import Group
from kvdoctor.core.vllm.refusals import VllmRefusal
from kvdoctor.core.vllm.specs import ModelSpecs, SpecKind


@dataclass(frozen=True)
class VllmContext:
    """Everything a vLLM hazard rule may look at."""

    flags: VllmFlags
    specs: ModelSpecs
    groups: tuple[Group, ...] | None  # None: vLLM refuses to plan the KV cache
    refusal: str | None
    hybrid: HybridManager
    connector: ConnectorVerdict
    refusals: tuple[VllmRefusal, ...] = ()  # start-up refusals of the launch (refusals.launch_refusals)
    refusal_where: rules.Cite | None = None  # where vLLM raises while planning the KV cache (``refusal``)


def vllm_refuses(ctx: VllmContext) -> Iterator[Hazard]:
    """A launch vLLM itself refuses at start-up, with its own message and where it raises (SGLang's
    KVD014): a refusal of the parallel layout, or of planning the KV cache (the groups), which the
    reason hazards (KVD101, KVD105) explain but which is always reported as what it is."""
    for refusal in ctx.refusals:
        yield Hazard(
            ERROR,
            "KVD114-VLLM-REFUSES",
            f"vLLM {rules.VLLM_VERSION} refuses this launch at start-up: {refusal}",
            str(refusal.where),
        )
    if ctx.refusal is not None:
        where = f" ({ctx.refusal_where})" if ctx.refusal_where is not None else ""
        yield Hazard(
            ERROR,
            "KVD114-VLLM-REFUSES",
            f"vLLM {rules.VLLM_VERSION} refuses to plan the KV cache, so the server does not start: "
            f"{ctx.refusal}{where}",
            str(ctx.refusal_where) if ctx.refusal_where is not None else None,
        )


def connector_no_hybrid(ctx: VllmContext) -> Iterator[Hazard]:
    name = ctx.connector.name
    if ctx.connector.supports_hma is not False or not (ctx.specs.has_mamba or _has_kind(ctx, SpecKind.SLIDING)):
        return
    if ctx.specs.has_mamba:
        yield Hazard(
            ERROR,
            "KVD101-CONNECTOR-NO-HYBRID",
            f"{name} does not subclass SupportsHMA, so vLLM turns the hybrid KV cache manager off "
            f"({rules.HMA_OFF}); this model's recurrent (Mamba/GDN) state then cannot be grouped and vLLM "
            "fails at start-up. Use OffloadingConnector (--kv-offloading-size N), NixlConnector or "
            "MooncakeConnector.",
        )
    else:
        yield Hazard(
            WARNING,
            "KVD101-CONNECTOR-NO-HYBRID",
            f"{name} does not subclass SupportsHMA: the hybrid KV cache manager is off and sliding-window "
            "layers keep KV for every token (promoted to full attention): correct, but more memory and "
            "bytes moved.",
        )


def hybrid_explicit_conflict(ctx: VllmContext) -> Iterator[Hazard]:
    if ctx.hybrid.conflict:
        yield Hazard(
            ERROR,
            "KVD105-HYBRID-MANAGER-CONFLICT",
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
        yield Hazard(
            ERROR,
            "KVD102-STATE-NOT-CARRIED",
            f"{ctx.connector.name} {verb} for {what}: {row.reason} ({row.where}). A request restored "
            "through it resumes without that state.",
        )


def block_scales_unverified(ctx: VllmContext) -> Iterator[Hazard]:
    scaled = any(s.block_scaled for s in ctx.specs.layers.values())
    if scaled and ctx.connector.name is not None:
        yield Hazard(
            WARNING,
            "KVD103-BLOCK-SCALES-UNVERIFIED",
            f"--kv-cache-dtype {ctx.flags.kv_cache_dtype} packs FP8 block scales into each KV page "
            f"({rules.NVFP4_PACKING}); {ctx.connector.name} copies whole pages, so the scales travel with "
            "the payload, but no vLLM test verifies their transfer: check a restore bitwise "
            "(kvdoctor roundtrip) before trusting it.",
        )


def preemption_recomputes(ctx: VllmContext) -> Iterator[Hazard]:
    if ctx.connector.name is None and not ctx.flags.prefix_caching:
        yield Hazard(
            WARNING,
            "KVD104-PREEMPTION-RECOMPUTES",
            "vLLM preempts by recompute only and keeps no CPU backup "
            f"({rules.PREEMPT}); with prefix caching off and no connector, every preempted request "
            "recomputes its whole prompt and output.",
        )
    else:
        yield Hazard(
            INFO,
            "KVD104-PREEMPTION-RECOMPUTES",
            f"vLLM preempts by recompute only ({rules.PREEMPT}): no backup is taken; a preempted request "
            "comes back through the prefix cache or a connector, never a CPU copy.",
        )


def external_connector(ctx: VllmContext) -> Iterator[Hazard]:
    if ctx.connector.transfer is not None and ctx.connector.rule is None:
        yield Hazard(
            WARNING,
            "KVD106-EXTERNAL-CONNECTOR",
            f"{ctx.connector.name} is loaded from {ctx.connector.transfer.module_path}: kvdoctor cannot "
            "tell which groups it carries (use --engine vllm to ask the class itself).",
        )


def not_modelled(ctx: VllmContext) -> Iterator[Hazard]:
    if ctx.flags.not_modelled:
        yield Hazard(
            INFO,
            "KVD109-FLAGS-NOT-MODELLED",
            f"vLLM flags accepted but not modelled: {' '.join(ctx.flags.not_modelled)}",
        )


def _has_kind(ctx: VllmContext, kind: SpecKind) -> bool:
    return any(s.kind is kind for s in ctx.specs.layers.values())


VLLM_RULES: tuple[Callable[[VllmContext], Iterator[Hazard]], ...] = (
    vllm_refuses,
    connector_no_hybrid,
    hybrid_explicit_conflict,
    state_not_carried,
    block_scales_unverified,
    preemption_recomputes,
    external_connector,
    not_modelled,
)
