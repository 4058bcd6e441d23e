"""What a round trip returns, whichever engine ran it: the verdict, one check per component, what it used.

:class:`RoundtripResult` is what ``roundtrip --json`` prints after the report header (:meth:`RoundtripResult.body`)
and what the tables, the JUnit file and the step summary are rendered from. Its field names are the public
JSON keys (``kvdoctor/schemas/roundtrip.json``): never renamed or removed, only added.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from kvdoctor._exceptions import EXIT_GATE, EXIT_PASS
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.core.registry import Hazard
from kvdoctor.roundtrip.options import Reductions

__all__ = ["HAZARD_KEYS", "ComponentCheck", "EngineUsed", "ModelUsed", "RoundtripResult", "VllmGroup", "VllmUsed"]

HAZARD_KEYS = ("severity", "code", "message")  # a hazard's keys in the round trip's JSON (schema: $defs/hazard)


@dataclass(frozen=True)
class ComponentCheck:
    """One row of the verdict: a state component of the retracted requests, or one of the checks
    beside them (``padding_slot``, ``free_slots``, ``resident_requests``, ``slot_reuse``,
    ``backup_aliasing``). The ``first_*`` fields locate the first differing byte (None when none)."""

    name: str
    bytes: int  # bytes compared
    mismatched_bytes: int
    equal: bool  # every compared byte agrees
    copies_out: int  # most copies out (device -> host) of this component for one request
    copies_in: int
    bytes_out: int  # bytes the copy ledger saw move out, all requests
    bytes_in: int
    ledger_ok: bool  # exactly one copy each way per request, of exactly the compared bytes
    first_request: int | None
    first_plane: str | None
    first_layer: int | None
    first_position: int | None
    first_slot: int | None
    ok: bool  # equal and ledger_ok: this row passes


@dataclass(frozen=True)
class ModelUsed:
    """What a run on kvdoctor's own model of SGLang's pools used (the ``used`` key of its report)."""

    model: str
    kv_pool: str
    token_index_space: str
    cpu_copy_carries_mamba: bool
    caller_backs_up_mamba: bool
    requests: int
    retracted: int
    max_tokens: int
    page_size: int
    seed: int
    reductions: str  # prose, as printed (kept: users parse it); ``reduction_limits`` is the same, structured
    full_layers: int
    swa_layers: int
    recurrent_layers: int
    kv_heads: int
    sliding_window: int | None
    scale_layout: str | None
    chunk: int
    pool_bytes: int
    restored_into_new_slots: bool
    max_slot_runs: int
    reduction_limits: Reductions  # {layers, heads}: at most this many per sub-pool; null keeps the model's


@dataclass(frozen=True)
class EngineUsed:
    """What a run on the installed SGLang used: its classes, what kvdoctor supplied, every stub."""

    model: str
    engine: str
    sglang_version: str
    kv_pool: str
    pool_classes: dict[str, str]
    cpu_copy_carries_mamba: bool
    requests: int
    retracted: int
    max_tokens: int
    page_size: int
    seed: int
    backend_source: str
    data: str
    stubs: list[str]
    notes: list[str]
    pool_tokens: int
    request_rows: int
    emulate_d2h: bool
    admission: str


@dataclass(frozen=True)
class VllmGroup:
    """One KV-cache group of a ``--engine vllm`` run and its copy ledger: which block ids vLLM's store
    descriptors read, the host slots they went to, the fresh block ids the load wrote, and the bytes each way."""

    group: int
    spec: str  # vLLM's spec class (FullAttentionSpec, SlidingWindowSpec, MambaSpec, ...)
    layers: int  # layers of the group moved (at most --layers)
    page_bytes: int  # one block of one layer
    block_ids: list[int]
    host_slots: list[int]
    new_block_ids: list[int]
    bytes_out: int  # bytes vLLM's store descriptors moved out of this group's tensors
    bytes_in: int
    expected_bytes: int  # blocks x layers x page bytes
    ledger_ok: bool


@dataclass(frozen=True)
class VllmUsed:
    """What a run on the installed vLLM's offloading worker used: its groups (the copy ledger), the request,
    and every run-time shim that lets the worker run on CPU, one by one."""

    model: str
    engine: str  # "vllm"
    vllm_version: str
    worker: str  # the vLLM class that stored and loaded the blocks
    tokens: int  # the one request's length
    seed: int
    layers_per_group: int | None  # --layers: at most this many layers of each group moved (None: all)
    groups: list[VllmGroup]
    shims: list[dict[str, str]]  # {name, why}: each patch of a vLLM or torch object for the run


@dataclass(frozen=True)
class RoundtripResult:
    """The verdict, the per-component checks, and what the run used: what ``--json`` prints (after the
    report header), what the tables, the JUnit file and the step summary are rendered from.

    Build it with :meth:`of`, which derives ``ok``, ``failing`` and ``inject_matched`` from the rows,
    so they cannot disagree with them.
    """

    ok: bool
    device: str
    kv_cache_dtype: str
    backend: str
    injected: str | None
    failing: list[str]
    expected_red: list[str]
    inject_matched: bool | None  # did the injected fault turn exactly its own rows red (None: nothing injected)
    hazards: list[Hazard]  # the launch line's error hazards (``inspect`` explains them); not gated here
    components: list[ComponentCheck]
    used: ModelUsed | EngineUsed | VllmUsed
    elapsed_s: float
    engine: EngineRef | None = None  # None: kvdoctor's own model; else the installed server that ran
    rules_revision: str | None = None  # the rules kvdoctor's model restates; None when SGLang's own code ran

    @classmethod
    def of(
        cls,
        *,
        device: str,
        kv_cache_dtype: str,
        backend: str,
        injected: str | None,
        components: list[ComponentCheck],
        used: ModelUsed | EngineUsed | VllmUsed,
        expected_red: list[str],
        hazards: list[Hazard],
        elapsed_s: float,
        engine: EngineRef | None = None,
        rules_revision: str | None = None,
    ) -> RoundtripResult:
        failing = [row.name for row in components if not row.ok]
        return cls(
            ok=not failing,
            device=device,
            kv_cache_dtype=kv_cache_dtype,
            backend=backend,
            injected=injected,
            failing=failing,
            expected_red=expected_red,
            inject_matched=None if injected is None else set(failing) == set(expected_red),
            hazards=hazards,
            components=components,
            used=used,
            elapsed_s=round(elapsed_s, 3),
            engine=engine,
            rules_revision=rules_revision,
        )

    @property
    def exit_code(self) -> int:
        """0 when every row passes, 1 when anything differs."""
        return EXIT_PASS if self.ok else EXIT_GATE

    def row(self, name: str) -> ComponentCheck:
        return next(r for r in self.components if r.name == name)

    def body(self) -> dict[str, Any]:
        """The report's own keys (after the header), in field order. A hazard is published with the keys the
        round trip has always given it (:data:`HAZARD_KEYS`): ``inspect`` is where a hazard's citation is read."""
        out = dataclasses.asdict(self)
        out["hazards"] = [{key: getattr(h, key) for key in HAZARD_KEYS} for h in self.hazards]
        return out
