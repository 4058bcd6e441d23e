"""One call from a model and a ``vllm serve`` line to everything ``inspect --server vllm`` reports."""

from __future__ import annotations

from collections.abc import Sequence

from kvdoctor.core import registry
from kvdoctor.core.config import ModelConfig, load_config
from kvdoctor.core.record import record
from kvdoctor.core.registry import Hazard, RefusalFacts
from kvdoctor.core.vllm import rules
from kvdoctor.core.vllm.connectors import ConnectorVerdict, HybridManager, hybrid_manager, verdict
from kvdoctor.core.vllm.flags import VllmFlags, parse_vllm_flags
from kvdoctor.core.vllm.grouping import Group, GroupingRefused, kv_cache_groups
from kvdoctor.core.vllm.hazards import VllmContext
from kvdoctor.core.vllm.refusals import VllmRefusal, launch_refusals
from kvdoctor.core.vllm.specs import ModelSpecs, SpecKind, build_specs

SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


@record(frozen=True)
class VllmAnalysis:
    """Everything the vLLM rule model derived for one launch; :meth:`report` makes the typed result."""

    config: ModelConfig
    flags: VllmFlags
    specs: ModelSpecs
    hybrid: HybridManager
    groups: tuple[Group, ...] | None
    refusal: str | None
    refusal_where: rules.Cite | None
    connector: ConnectorVerdict
    hazards: tuple[Hazard, ...]
    refusals: tuple[VllmRefusal, ...] = ()  # start-up refusals (KVD114), as the hazards carry them

    @property
    def worst_severity(self) -> str | None:
        return min((h.severity for h in self.hazards), key=SEVERITY_ORDER.__getitem__, default=None)

    def _mamba_block_reason(self) -> str | None:
        if self.specs.mamba_block_size is None:
            return None
        if self.flags.prefix_caching:
            return f"the attention block: prefix caching on, mamba_cache_mode align ({rules.ALIGN_HYBRID.where})"
        return f"max_model_len: prefix caching off, mamba_cache_mode none ({rules.MAMBA_BLOCK_MAX_LEN.where})"

    def report(self) -> VllmReport:
        """``inspect --server vllm``'s typed result: what ``--json`` prints and the tables render."""
        specs = self.specs
        return VllmReport(
            server="vllm",
            rules_revision=rules.RULES_REVISION,
            model=VllmModelFacts(
                source=self.config.source,
                model_type=self.config.model_type,
                architecture=specs.architecture,
                family=specs.family.value,
                layers=len(specs.layers),
            ),
            block_size=BlockSizeFacts(
                tokens=specs.block_size,
                reason=specs.block_size_reason,
                mamba_state_bytes_before_padding=specs.mamba_page_padded_from,
                max_model_len=specs.max_model_len.tokens if specs.max_model_len else None,
                max_model_len_reason=specs.max_model_len.reason if specs.max_model_len else None,
                mamba_block_size=specs.mamba_block_size,
                mamba_block_reason=self._mamba_block_reason(),
            ),
            layer_specs=tuple(
                LayerSpecRow(
                    layer=name,
                    spec=s.kind.value,
                    block_size=s.block_size,
                    page_size_bytes=s.page_size_bytes,
                    bytes_per_token=s.bytes_per_token,
                    detail=s.describe(),
                )
                for name, s in specs.layers.items()
            ),
            hybrid_kv_cache_manager=HybridFacts(
                enabled=self.hybrid.enabled,
                reason=self.hybrid.reason,
                where=str(self.hybrid.where) if self.hybrid.where else None,
            ),
            groups=None if self.groups is None else tuple(_group_row(i, g) for i, g in enumerate(self.groups)),
            refusal=None if self.refusal is None else RefusalFacts(self.refusal, str(self.refusal_where)),
            preemption=PreemptionFacts(mode="recompute", backup=None, where=str(rules.PREEMPT)),
            connector=_connector_facts(self.connector),
            hazards=self.hazards,
        )


# ---- the typed result (its field names are the --json keys users parse: add, never rename) -------
@record(frozen=True)
class VllmModelFacts:
    """The model as vLLM classifies it: config source, type, architecture, family, layers with state."""

    source: str
    model_type: str
    architecture: str
    family: str
    layers: int  # layers that hold state


@record(frozen=True)
class BlockSizeFacts:
    """The block size vLLM runs with and why (and the max_model_len and Mamba block it derives)."""

    tokens: int
    reason: str
    mamba_state_bytes_before_padding: int | None
    max_model_len: int | None = None  # the length vLLM runs with (core/vllm/model_len.py)
    max_model_len_reason: str | None = None
    mamba_block_size: int | None = None  # every MambaSpec's block: the attention block, or max_model_len
    mamba_block_reason: str | None = None


@record(frozen=True)
class LayerSpecRow:
    """One layer's KV cache spec, as ``--json`` lists it."""

    layer: str
    spec: str
    block_size: int
    page_size_bytes: int
    bytes_per_token: int | None  # None: a per-request (Mamba) spec
    detail: str


@record(frozen=True)
class HybridFacts:
    """Whether the hybrid KV cache manager is on, why, and where vLLM decides it."""

    enabled: bool
    reason: str
    where: str | None


@record(frozen=True)
class GroupRow:
    """One KV cache group per TP rank: its spec, layers, block, page and bytes."""

    group: int
    spec: str
    layers: tuple[str, ...]
    block_size: int
    page_size_bytes: int
    bytes_per_block: int
    bytes_per_token: int | None
    per_request: bool
    padding_layers: int


@record(frozen=True)
class PreemptionFacts:
    """What vLLM does with a preempted request's state (recompute, no backup), and where."""

    mode: str
    backup: None  # vLLM keeps no copy of a preempted request's state: it recomputes
    where: str


@record(frozen=True)
class ConnectorGroupRow:
    """Whether the connector carries one group's state, why, and where vLLM says so."""

    group: int  # -1: every group
    spec: str
    layers: int
    status: str
    reason: str
    where: str


@record(frozen=True)
class ConnectorFacts:
    """The connector a launch selects, its HMA support, and one row per group."""

    name: str
    source: str
    role: str | None
    supports_hma: bool | None
    kind: str | None
    where: str | None
    groups: tuple[ConnectorGroupRow, ...]


@record(frozen=True)
class VllmReport:
    """``kvdoctor inspect --server vllm``'s result from the vLLM rule model."""

    server: str
    rules_revision: str
    model: VllmModelFacts
    block_size: BlockSizeFacts
    layer_specs: tuple[LayerSpecRow, ...]
    hybrid_kv_cache_manager: HybridFacts
    groups: tuple[GroupRow, ...] | None  # None: vLLM refuses to group these layers (see refusal)
    refusal: RefusalFacts | None
    preemption: PreemptionFacts
    connector: ConnectorFacts | None
    hazards: tuple[Hazard, ...]


@record(frozen=True)
class VllmUnavailable:
    """``--engine vllm`` where vLLM cannot be imported: the rule model answered alone, and why."""

    available: bool
    reason: str


@record(frozen=True)
class VllmCheck:
    """One question both answered: kvdoctor's answer, vLLM's, and whether they agree."""

    question: str
    kvdoctor: str
    vllm: str
    agree: bool


@record(frozen=True)
class VllmGroupAnswer:
    """One KV cache group as the installed vLLM builds it."""

    spec: str
    layers: tuple[str, ...]
    block_size: int
    page_size_bytes: int


@record(frozen=True)
class VllmAnswersFacts:
    """The installed vLLM's own answers, question by question, beside the rule model's."""

    available: bool
    name: str
    version: str | None
    path: str | None
    inputs_from_kvdoctor: tuple[str, ...]
    checks: tuple[VllmCheck, ...]
    groups: tuple[VllmGroupAnswer, ...] | None


@record(frozen=True)
class VllmBesideReport(VllmReport):
    """``--engine vllm``: the rule model's result and vLLM's own answers (or why there are none)."""

    vllm: VllmAnswersFacts | VllmUnavailable


def _group_row(i: int, g: Group) -> GroupRow:
    per_token = g.spec.bytes_per_token
    return GroupRow(
        group=i,
        spec=g.kind.value,
        layers=tuple(g.layer_names),
        block_size=g.spec.block_size,
        page_size_bytes=g.spec.page_size_bytes,
        bytes_per_block=g.spec.page_size_bytes * len(g.layer_names),
        bytes_per_token=None if per_token is None else per_token * len(g.layer_names),
        per_request=g.kind is SpecKind.MAMBA,
        padding_layers=g.padding_layers,
    )


def _connector_facts(v: ConnectorVerdict) -> ConnectorFacts | None:
    if v.transfer is None:
        return None
    return ConnectorFacts(
        name=v.transfer.connector,
        source=v.transfer.source,
        role=v.transfer.role,
        supports_hma=v.supports_hma,
        kind=v.rule.kind if v.rule else None,
        where=str(v.rule.where) if v.rule else None,
        groups=tuple(
            ConnectorGroupRow(
                group=r.group,
                spec=r.kind,
                layers=r.layers,
                status=r.status.value,
                reason=r.reason,
                where=str(r.where),
            )
            for r in v.rows
        ),
    )


def analyze_vllm_config(config: ModelConfig, flags: VllmFlags) -> VllmAnalysis:
    specs = build_specs(config, flags)
    hybrid = hybrid_manager(flags, specs)
    groups: tuple[Group, ...] | None
    refusal, where = None, None
    try:
        groups = tuple(kv_cache_groups(specs.layers, hybrid_manager=hybrid.enabled))
    except GroupingRefused as exc:
        groups, refusal, where = None, str(exc), exc.where
    connector = verdict(flags, specs, None if groups is None else list(groups), refusal, where)
    attention = any(s.kind is not SpecKind.MAMBA for s in specs.layers.values())
    refusals = launch_refusals(config, flags, mla=specs.family is rules.Family.MLA, attention=attention)
    if specs.max_model_len is not None and specs.max_model_len.refusal is not None:
        refusals = (*refusals, specs.max_model_len.refusal)  # --max-model-len above what the config allows
    ctx = VllmContext(flags, specs, groups, refusal, hybrid, connector, refusals, where)
    found = registry.find_hazards("vllm", ctx)
    found = tuple(sorted(found, key=lambda h: SEVERITY_ORDER[h.severity]))
    return VllmAnalysis(config, flags, specs, hybrid, groups, refusal, where, connector, found, refusals)


def analyze_vllm(model: str, argv: Sequence[str]) -> VllmAnalysis:
    """MODEL (path, directory, fixture or cached Hub id) under the vLLM flags ARGV."""
    return analyze_vllm_config(load_config(model), parse_vllm_flags(argv))
