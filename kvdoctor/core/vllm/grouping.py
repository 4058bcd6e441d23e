"""vLLM's KV cache groups, restated from ``get_kv_cache_groups`` (v1/core/kv_cache_planning.py:1113-1200).

Layers whose specs are equal share one block table (a *group*); the KV cache manager allocates,
caches and hands to connectors per group. Restated for the layer-outermost layout vLLM resolves by
default (``LBNHC``, v1/attention/backends/utils.py:228-236), without HiSparse or hidden-state layers:

1. hybrid manager off (``--disable-hybrid-kv-cache-manager``, or a connector without ``SupportsHMA``):
   sliding-window specs are promoted to full attention; a Mamba layer beside attention cannot be
   promoted and vLLM refuses to start (``_promote_local_kv_cache_specs``, lines 744-815);
2. one spec for every layer → one group; one type (all full, all one window, all equal Mamba) → one group;
3. otherwise page sizes are unified (lines 346-408: smaller attention pages grow their block size by the
   ratio, Mamba pages are padded), equal specs are bucketed, and buckets are cut into groups of the
   smallest bucket's size (the largest when it is under 1.5x the smallest), layer ``i::n`` per group.
"""

from __future__ import annotations

from dataclasses import replace

from kvdoctor.core.cite import Cite
from kvdoctor.core.record import record
from kvdoctor.core.vllm import rules
from kvdoctor.core.vllm.specs import LayerSpec, SpecKind


class GroupingRefused(Exception):
    """vLLM raises while planning the KV cache: the server would not start.

    An internal signal of this model, not a user error (no ``KvdoctorError``, no exit code): the
    analysis catches it and reports the refusal, with vLLM's place (WHERE), as a finding."""

    def __init__(self, message: str, where: Cite) -> None:
        super().__init__(message)
        self.where = where


@record(frozen=True)
class Group:
    """One KV cache group: its layers (names, model order within the group) and the merged spec."""

    layer_names: tuple[str, ...]
    spec: LayerSpec
    padding_layers: int = 0  # layers vLLM pads the group with (memory it wastes)

    @property
    def kind(self) -> SpecKind:
        return self.spec.kind

    def key(self) -> tuple[str, int, int, tuple[str, ...]]:
        """What drift compares: spec class, block size, page bytes, layers."""
        return (self.spec.kind.value, self.spec.block_size, self.spec.page_size_bytes, self.layer_names)


def _mergeable(a: LayerSpec, b: LayerSpec) -> bool:
    """``type(a).merge([a, b])`` succeeds: equal specs, or full attention differing only in window."""
    if a == b:
        return True
    if a.kind is SpecKind.FULL and b.kind is SpecKind.FULL:
        return replace(a, sliding_window=None) == replace(b, sliding_window=None) and (
            a.sliding_window is None or b.sliding_window is None or a.sliding_window == b.sliding_window
        )
    return False


def _merge(specs: list[LayerSpec]) -> LayerSpec:
    windows = {s.sliding_window for s in specs if s.sliding_window is not None}
    return replace(specs[0], sliding_window=windows.pop() if windows else None)


def _promote(specs: dict[str, LayerSpec]) -> dict[str, LayerSpec]:
    """unify_hybrid_kv_cache_specs / _promote_local_kv_cache_specs (kv_cache_planning.py:744-876)."""
    kinds = {s.kind for s in specs.values()}
    promoted = dict(specs)
    if SpecKind.FULL in kinds and SpecKind.SLIDING in kinds:
        promoted = {n: replace(s, kind=SpecKind.FULL) if s.kind is SpecKind.SLIDING else s for n, s in specs.items()}
    if len({s.kind for s in promoted.values()}) > 1:
        raise GroupingRefused(
            "the hybrid KV cache manager is off, and recurrent (Mamba) layers cannot be promoted "
            "to full attention: 'Failed to promote local KV cache specs to one unified type.'",
            rules.PROMOTE,
        )
    return promoted


def _uniform_type(specs: list[LayerSpec]) -> bool:
    """UniformTypeKVCacheSpecs.is_uniform_type: every layer needs the same token slots."""
    first = specs[0]
    if first.kind is SpecKind.SLIDING:
        return all(s.kind is SpecKind.SLIDING and s.sliding_window == first.sliding_window for s in specs)
    if first.kind is SpecKind.MAMBA:
        return all(s.kind is SpecKind.MAMBA and s.page_size_bytes == first.page_size_bytes for s in specs)
    return all(s.kind is first.kind and s.sliding_window is None for s in specs)


def _unify_pages(specs: dict[str, LayerSpec]) -> dict[str, LayerSpec]:
    """unify_kv_cache_spec_page_size (kv_cache_planning.py:346-408)."""
    pages = {s.page_size_bytes for s in specs.values()}
    if len(pages) <= 1:
        return specs
    top = max(pages)
    unified: dict[str, LayerSpec] = {}
    for name, spec in specs.items():
        page = spec.page_size_bytes
        if page == top:
            unified[name] = spec
        elif spec.kind is SpecKind.MAMBA:
            unified[name] = replace(spec, page_size_padded=top)
        elif top % page == 0:
            unified[name] = replace(spec, block_size=spec.block_size * (top // page))
        elif spec.kind is not SpecKind.MLA:
            unified[name] = replace(spec, page_size_padded=top)
        else:
            raise GroupingRefused(
                f"layer {name}: page size is not divisible by the maximum page size and cannot be padded",
                rules.UNIFY_PAGE,
            )
    return unified


def kv_cache_groups(specs: dict[str, LayerSpec], *, hybrid_manager: bool) -> list[Group]:
    """The groups vLLM's ``get_kv_cache_groups`` makes of SPECS (layer name → spec, model order)."""
    if not hybrid_manager:
        specs = _promote(specs)
    if not specs:
        return []
    values = list(specs.values())
    if all(_mergeable(values[0], s) for s in values[1:]) or _uniform_type(values):
        return [Group(tuple(specs), _merge(values) if values[0].kind is SpecKind.FULL else values[0])]
    specs = _unify_pages(specs)
    buckets: list[tuple[list[str], list[LayerSpec]]] = []
    for name, spec in specs.items():  # equal specs first, in first-seen order (a dict keyed by spec)
        for names, bucket_specs in buckets:
            if bucket_specs[0] == spec:
                names.append(name)
                bucket_specs.append(spec)
                break
        else:
            buckets.append(([name], [spec]))
    merged: list[tuple[list[str], list[LayerSpec]]] = []
    for names, bucket_specs in buckets:  # then buckets whose specs merge (full attention, other window)
        for m_names, m_specs in merged:
            if all(_mergeable(m_specs[0], s) for s in bucket_specs) and _mergeable(bucket_specs[0], m_specs[0]):
                m_names.extend(names)
                m_specs.extend(bucket_specs)
                break
        else:
            merged.append((list(names), list(bucket_specs)))
    sizes = [len(names) for names, _ in merged]
    group_size = max(sizes) if max(sizes) < min(sizes) * 1.5 else min(sizes)
    groups: list[Group] = []
    for names, bucket_specs in merged:
        count = -(-len(names) // group_size)
        padding = (group_size - len(names) % group_size) % group_size
        for i in range(count):
            groups.append(Group(tuple(names[i::count]), _merge(bucket_specs), padding if i == count - 1 else 0))
    return groups
