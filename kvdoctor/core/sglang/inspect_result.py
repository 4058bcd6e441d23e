"""``inspect``'s one result, typed: what ``--json`` prints, the tables render and CI verdicts read.

Frozen dataclasses built once from an :class:`~kvdoctor.core.sglang.analysis.Analysis`. ``--json`` is
``kvdoctor.report.serialize.jsonable`` of them (under the run header), so the key names below ARE
the public contract users already parse: a field is never renamed or removed, only added. The
renderers and the JUnit/step-summary functions read the same attributes, so the tables, the JSON and
the CI verdicts can never disagree.

Where today's JSON carries one of two keys (a component's ``bytes_per_token`` or
``bytes_per_request``), there are two classes, each with its own field: a reader may test which key
is present, so neither may appear as ``null`` beside the other.

Pure data (no torch), like the rest of ``core``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.core.record import record
from kvdoctor.core.registry import Hazard, RefusalFacts, ungated
from kvdoctor.core.sglang.analysis import Analysis
from kvdoctor.core.sglang.policy import Condition, PoolLayout
from kvdoctor.core.sglang.sizing import Sizing, forecast
from kvdoctor.core.sglang.spec import PER_TOKEN, Component

__all__ = [
    "BackupFacts",
    "ComponentRow",
    "ForecastFacts",
    "InspectReport",
    "LayerCounts",
    "ModelFacts",
    "PerRequestComponent",
    "PerTokenComponent",
    "RefusalFacts",
    "SizingFacts",
    "inspect_report",
    "shown",
    "ungated",
]


@record(frozen=True)
class LayerCounts:
    """The model's layers, in all and by the kind of state each keeps."""

    total: int
    full_attention: int
    sliding_window: int
    recurrent: int


@record(frozen=True)
class ModelFacts:
    """The model as SGLang classifies it, and the SGLang rule (predicate, file:lines) that said so."""

    source: str
    model_type: str
    text_model_type: str
    architecture: str
    family: str
    sglang_predicate: str | None  # None: no recurrent-state rule matched (attention only)
    rule_source: str
    is_hybrid_swa: bool
    is_mla: bool
    layers: LayerCounts
    sliding_window: int | None
    tp_size: int


@record(frozen=True)
class ComponentRow:
    """One state component per TP rank; its size is per token or per request (see the subclasses)."""

    name: str
    pool: str
    sub_pool: str
    index: str
    dtype: str
    layers: int
    shape_per_layer: tuple[tuple[int, ...], ...]

    @property
    def size(self) -> int:
        raise NotImplementedError

    @property
    def per(self) -> str:
        """What the size is counted against: ``token`` or ``request``."""
        raise NotImplementedError


@record(frozen=True)
class PerTokenComponent(ComponentRow):
    """A component sized per token (KV)."""

    bytes_per_token: int

    @property
    def size(self) -> int:
        return self.bytes_per_token

    @property
    def per(self) -> str:
        return "token"


@record(frozen=True)
class PerRequestComponent(ComponentRow):
    """A component sized per request (recurrent state)."""

    bytes_per_request: int

    @property
    def size(self) -> int:
        return self.bytes_per_request

    @property
    def per(self) -> str:
        return "request"


@record(frozen=True)
class BackupFacts:
    """How a PD decode server backs a retracted request's state up, and why (``reasons``)."""

    backend: str
    applies: bool
    explicit: bool
    source: str
    reasons: tuple[Condition, ...]
    hicache_ratio: float | None
    hicache_ratio_reason: str


@record(frozen=True)
class ForecastFacts:
    """Whether CONCURRENT requests of TOKENS_PER_REQUEST fit the pools or make the server retract."""

    concurrent: int
    tokens_per_request: int
    peak_tokens: int
    capacity_tokens: int | None
    requests_fit: int | None
    will_retract: bool | None  # None: the pools are sized from GPU memory, unknown here


@record(frozen=True)
class SizingFacts(Sizing):
    """The pools' capacities (``Sizing``'s fields, as before) and the retraction forecast."""

    forecast: ForecastFacts


@record(frozen=True)
class InspectReport:
    """``kvdoctor inspect``'s result from kvdoctor's rule model (the keys of its ``--json``)."""

    model: ModelFacts
    kv_cache_dtype: str
    components: tuple[ComponentRow, ...]
    uses_ssm_state: bool
    kv_pool: str
    pools: PoolLayout
    cpu_copy_carries_mamba: bool
    caller_backs_up_mamba: bool
    retraction_backup: BackupFacts
    pd_state_types: tuple[str, ...]
    sizing: SizingFacts
    hazards: tuple[Hazard, ...]
    refusals: tuple[RefusalFacts, ...]
    not_modelled_flags: tuple[str, ...]
    rules_revision: str


# ---- the installed SGLang's answers (``--engine sglang``), as data -------------------------------
# Only ``--engine sglang`` (and ``drift``) reads these, so this module makes them on first use, through
# ``__getattr__`` below: a plain ``inspect`` never pays for them (each frozen dataclass costs start-up its
# generated methods, over a millisecond apiece; issue 17 holds inspect's start-up to 1.5x the typer floor).
# ``from kvdoctor.core.sglang.inspect_result import SglangAnswers`` reads them as any other name here.
ENGINE_ANSWER_TYPES = (
    "LiveRefusal",
    "FieldDrift",
    "SglangAnswers",
    "InspectBesideReport",
    "ModelSource",
    "RefusedInspectReport",
)
__all__ += ENGINE_ANSWER_TYPES


_DEFINING = threading.Lock()  # two threads' first reads must not make two classes of one name


def __getattr__(name: str) -> Any:
    if name in ENGINE_ANSWER_TYPES:
        with _DEFINING:
            if name not in globals():
                _define_engine_answer_types()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _define_engine_answer_types() -> None:
    """Define :data:`ENGINE_ANSWER_TYPES` in this module, as if written at its top level."""

    @record(frozen=True)
    class LiveRefusal:
        """SGLang refuses the launch: at which stage, and its message with the SGLang frame that raised."""

        stage: str
        message: str

    @record(frozen=True)
    class FieldDrift:
        """One field where kvdoctor's rules and the installed SGLang disagree."""

        field: str
        kvdoctor: Any
        sglang: Any

    @record(frozen=True)
    class SglangAnswers:
        """The installed SGLang's answers beside kvdoctor's, field by field (``--json``'s ``sglang`` key).

        ``fields`` and ``kvdoctor`` are keyed by field name (``kv_pool``, ``full_kv.dtype`` …): an open
        set, the comparison's vocabulary, so a mapping and not a class.
        """

        engine: EngineRef  # the installed SGLang that answered
        stubs: tuple[str, ...]
        refusal: LiveRefusal | None
        fields: Mapping[str, Any]
        skipped: Mapping[str, str]
        kvdoctor: Mapping[str, Any]
        kvdoctor_refusal: str | None
        drift: tuple[FieldDrift, ...]
        rules_version: str | None = None  # the SGLang version kvdoctor's rules restate (added: issue 20)
        differs_from_rules: bool | None = None  # whether engine.version is another one

    @record(frozen=True)
    class InspectBesideReport(InspectReport):
        """``inspect --engine sglang``: the rule model's result, with SGLang's answers beside it."""

        sglang: SglangAnswers

    @record(frozen=True)
    class ModelSource:
        source: str

    @record(frozen=True)
    class RefusedInspectReport:
        """``inspect --engine sglang`` where kvdoctor's rules refuse the model: only SGLang answered."""

        model: ModelSource
        hazards: tuple[Hazard, ...]
        sglang: SglangAnswers
        rules_revision: None = None

    made = (LiveRefusal, FieldDrift, SglangAnswers, InspectBesideReport, ModelSource, RefusedInspectReport)
    for cls in made:
        cls.__qualname__ = cls.__name__  # named as a top-level class: repr, pickle, error messages
        globals()[cls.__name__] = cls


def shown(name: str, value: Any) -> Any:
    """A live value as a person reads it: a pool by its own class, not its whole MRO (SGLang's answer for a
    ``*pool`` field is the class and its bases, so a subclass of the class kvdoctor names agrees)."""
    if isinstance(value, list) and value and all(isinstance(c, str) for c in value) and name.endswith("pool"):
        return value[0]
    return value


# ---- building it --------------------------------------------------------------------------------
def _layers(a: Analysis) -> LayerCounts:
    spec = a.spec
    return LayerCounts(
        total=spec.num_layers,
        full_attention=spec.full.layers if spec.full else 0,
        sliding_window=spec.swa.layers if spec.swa else 0,
        recurrent=spec.recurrent.layers if spec.recurrent else 0,
    )


def _component(a: Analysis, c: Component) -> ComponentRow:
    common = {
        "name": c.name,
        "pool": a.layout.pool_of(c.sub_pool),
        "sub_pool": c.sub_pool,
        "index": c.index,
        "dtype": c.dtype,
        "layers": c.layers,
        "shape_per_layer": tuple(tuple(s) for s in c.shapes),
    }
    if c.index == PER_TOKEN:
        return PerTokenComponent(**common, bytes_per_token=c.bytes)
    return PerRequestComponent(**common, bytes_per_request=c.bytes)


def _sizing(a: Analysis, request_tokens: int, concurrent: int) -> SizingFacts:
    fc = forecast(a.sizing, a.spec, concurrent, request_tokens)
    facts = ForecastFacts(
        concurrent=fc.concurrent,
        tokens_per_request=fc.tokens_per_request,
        peak_tokens=fc.peak_tokens,
        capacity_tokens=fc.capacity_tokens,
        requests_fit=fc.requests_fit,
        will_retract=fc.will_retract,
    )
    return SizingFacts(**{f.name: getattr(a.sizing, f.name) for f in fields(Sizing)}, forecast=facts)


def inspect_report(a: Analysis, request_tokens: int, concurrent: int) -> InspectReport:
    """The result ``kvdoctor inspect`` reports for analysis A (forecast for CONCURRENT × REQUEST_TOKENS)."""
    cls, b = a.classification, a.backup
    return InspectReport(
        model=ModelFacts(
            source=a.config.source,
            model_type=a.config.model_type,
            text_model_type=a.config.text_model_type,
            architecture=a.config.architecture,
            family=cls.family,
            sglang_predicate=cls.predicate,
            rule_source=cls.source,
            is_hybrid_swa=cls.is_hybrid_swa,
            is_mla=cls.is_mla,
            layers=_layers(a),
            sliding_window=a.spec.sliding_window,
            tp_size=a.spec.tp_size,
        ),
        kv_cache_dtype=a.spec.kv_dtype.flag,
        components=tuple(_component(a, c) for c in a.spec.components),
        uses_ssm_state=cls.uses_ssm_state,
        kv_pool=a.layout.kv_pool,
        pools=a.layout,
        cpu_copy_carries_mamba=a.layout.cpu_copy_carries_mamba,
        caller_backs_up_mamba=a.layout.caller_backs_up_mamba,
        retraction_backup=BackupFacts(
            backend=b.backend,
            applies=b.applies,
            explicit=b.explicit,
            source=b.source,
            reasons=tuple(b.conditions),
            hicache_ratio=b.hicache_ratio,
            hicache_ratio_reason=b.hicache_ratio_reason,
        ),
        pd_state_types=tuple(a.pd_state_types),
        sizing=_sizing(a, request_tokens, concurrent),
        hazards=tuple(a.hazards),
        refusals=tuple(RefusalFacts(message=r.message, where=r.where) for r in a.refusals),
        not_modelled_flags=tuple(a.flags.not_modelled),
        rules_revision=a.rules_revision,
    )
