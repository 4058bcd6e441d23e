"""Which KV cache groups the configured connector carries, and which it leaves behind (vLLM 0.33).

vLLM preempts by recompute only (``Scheduler._preempt_request``, v1/core/sched/scheduler.py:1799-1843:
blocks freed, ``num_computed_tokens = 0``, no CPU backup); a preempted or offloaded request's state
comes back only through the prefix cache or a KV connector. So the question per group is: does the
connector move it, and is it allowed to start at all (the hybrid KV cache manager)?
"""

from __future__ import annotations

from enum import Enum

from kvdoctor.core.record import record
from kvdoctor.core.vllm import rules
from kvdoctor.core.vllm.flags import KvTransfer, VllmFlags
from kvdoctor.core.vllm.grouping import Group
from kvdoctor.core.vllm.specs import ModelSpecs, SpecKind


class Status(str, Enum):
    """What a connector does with one group."""

    CARRIED = "carried"
    WINDOW = "carried (window only)"
    LEFT = "left behind"
    REFUSED = "start-up failure"
    UNKNOWN = "not modelled"


@record(frozen=True)
class HybridManager:
    """Whether vLLM runs the hybrid KV cache manager (one block table per group) and why."""

    enabled: bool
    reason: str
    where: rules.Cite | None = None
    conflict: bool = False  # explicitly enabled, but the connector forbids it: vLLM raises


@record(frozen=True)
class GroupRow:
    """One group's fate under the connector: carried or not, why, and vLLM's file:lines."""

    group: int
    kind: str
    layers: int
    status: Status
    reason: str
    where: rules.Cite


@record(frozen=True)
class ConnectorVerdict:
    """The connector (or None), its HMA support, and one row per group."""

    transfer: KvTransfer | None
    rule: rules.ConnectorRule | None
    supports_hma: bool | None
    rows: tuple[GroupRow, ...]

    @property
    def name(self) -> str | None:
        return self.transfer.connector if self.transfer else None


def connector_supports_hma(transfer: KvTransfer | None) -> bool | None:
    """KVConnectorFactory.supports_hma_config (factory.py:131-150); MultiConnector asks every child."""
    if transfer is None:
        return None
    if transfer.module_path:
        return None  # an external class: only its import can tell
    if transfer.connector == "MultiConnector":
        children = transfer.extra.get("connectors") or []
        names = [c.get("kv_connector") for c in children if isinstance(c, dict)]
        return all(n in rules.CONNECTORS and rules.CONNECTORS[n].supports_hma for n in names)
    return rules.CONNECTORS[transfer.connector].supports_hma


def hybrid_manager(flags: VllmFlags, specs: ModelSpecs) -> HybridManager:
    """VllmConfig.__post_init__ (config/vllm.py:2263-2297): the user, or the connector, decides."""
    hma = connector_supports_hma(flags.transfer)
    if flags.disable_hybrid_kv_cache_manager is True:
        return HybridManager(False, "--disable-hybrid-kv-cache-manager")
    if hma is False:
        name = flags.transfer.connector if flags.transfer else "?"
        if flags.disable_hybrid_kv_cache_manager is False:
            return HybridManager(
                False,
                f"explicitly enabled, but {name} does not subclass SupportsHMA: vLLM raises "
                "'Hybrid KV cache manager was explicitly enabled but is not supported'",
                rules.HMA_OFF,
                conflict=True,
            )
        return HybridManager(False, f"{name} does not subclass SupportsHMA", rules.HMA_OFF)
    return HybridManager(True, "default (on)" if flags.disable_hybrid_kv_cache_manager is None else "explicitly on")


def _row(i: int, group: Group, status: Status, reason: str, where: rules.Cite) -> GroupRow:
    return GroupRow(i, group.kind.value, len(group.layer_names), status, reason, where)


def _offload_row(i: int, group: Group, rule: rules.ConnectorRule, flags: VllmFlags, specs: ModelSpecs) -> GroupRow:
    kind = group.kind
    if kind is SpecKind.CIRCULAR:
        return _row(
            i, group, Status.LEFT, "ring buffer: prefix_cacheable=False, never offloaded", rules.CIRCULAR_NOT_CACHEABLE
        )
    # The assertion compares every group's block with the hash block: a pure Mamba model (no attention group) has
    # one block, max_model_len, and passes; a hybrid's attention block does not divide it.
    if specs.is_hybrid and not flags.prefix_caching and rule.name == "OffloadingConnector":
        return _row(
            i,
            group,
            Status.REFUSED,
            "Mamba block size = max_model_len without prefix caching: the "
            "offloading config asserts 'Hybrid models (e.g. Mamba+Attention) need --enable-prefix-caching'",
            rules.OFFLOAD_PREFIX_CACHING,
        )
    if kind is SpecKind.MAMBA:
        if not rule.carries_mamba:
            return _row(i, group, Status.LEFT, f"{rule.name} has no MambaSpec path", rule.where)
        if rule.name == "MooncakeStoreConnector" and not flags.prefix_caching:
            return _row(i, group, Status.REFUSED, "MambaSpec needs mamba_cache_mode align (prefix caching)", rule.where)
        where = rules.OFFLOAD_MAMBA if rule.name == "OffloadingConnector" else rule.where
        return _row(i, group, Status.CARRIED, "Mamba state page registered whole (one state per request)", where)
    if kind is SpecKind.SLIDING and rule.name == "OffloadingConnector":
        return _row(
            i,
            group,
            Status.WINDOW,
            f"window {group.spec.sliding_window} tokens, window-sized in chunks",
            rules.OFFLOAD_WINDOW,
        )
    return _row(i, group, Status.CARRIED, "prefix-cacheable group", rules.TRANSFER_GROUPS)


def verdict(
    flags: VllmFlags,
    specs: ModelSpecs,
    groups: list[Group] | None,
    refusal: str | None,
    refusal_where: rules.Cite | None,
) -> ConnectorVerdict:
    """One row per group for the configured connector (none: no rows)."""
    transfer = flags.transfer
    if transfer is None:
        return ConnectorVerdict(None, None, None, ())
    rule = None if transfer.module_path else rules.CONNECTORS.get(transfer.connector)
    hma = connector_supports_hma(transfer)
    if groups is None:  # vLLM refuses to plan the cache: nothing is carried because nothing starts
        row = GroupRow(-1, "all", len(specs.layers), Status.REFUSED, refusal or "", refusal_where or rules.GROUPING)
        return ConnectorVerdict(transfer, rule, hma, (row,))
    rows: list[GroupRow] = []
    for i, group in enumerate(groups):
        if rule is None:
            rows.append(
                _row(
                    i, group, Status.UNKNOWN, "external connector (kv_connector_module_path)", rules.CONNECTOR_REGISTRY
                )
            )
        elif rule.name == "LMCacheMPConnector" and len(groups) > 1:
            rows.append(
                _row(
                    i,
                    group,
                    Status.REFUSED,
                    "more than one group: 'LMCacheMPConnector only works without hybrid kv cache manager'",
                    rules.LMCACHE_MP_ONE_GROUP,
                )
            )
        elif rule.kind == "offload":
            rows.append(_offload_row(i, group, rule, flags, specs))
        elif rule.kind == "pd":
            if group.kind is SpecKind.CIRCULAR:
                rows.append(_row(i, group, Status.UNKNOWN, "ring-buffer transfer not modelled", rule.where))
            elif group.kind is SpecKind.MAMBA:
                rows.append(_row(i, group, Status.CARRIED, "conv + SSM state transferred per request", rule.where))
            else:
                rows.append(_row(i, group, Status.CARRIED, "KV blocks transferred", rule.where))
        else:
            rows.append(_row(i, group, Status.LEFT, f"{rule.name} moves no KV state ({rule.note})", rule.where))
    return ConnectorVerdict(transfer, rule, hma, tuple(rows))
