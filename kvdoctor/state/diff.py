"""Bitwise diff of every component: what each request held before retraction versus after restore.

Captures read the pools by plain indexing, never through the copy engine, so a bug in the engine
cannot hide itself. Every comparison is on ``uint8`` bytes. The copy ledger is judged beside the
bytes: a component that moved twice, or not at all, is red even when its bytes happen to agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import pandas as pd
import torch

from kvdoctor.state.fill import background
from kvdoctor.state.host_copy import CopyLedger
from kvdoctor.state.pools import PADDING_SLOT, Plane, Pools, Request, token_slots

PADDING = "padding_slot"
FREE = "free_slots"
RESIDENT = "resident_requests"
SLOT_REUSE = "slot_reuse"


@dataclass
class Capture:
    """One request's bytes of one component: plane name -> (layers, positions, bytes per position)."""

    planes: dict[str, torch.Tensor]
    slots: torch.Tensor  # the slot of each position (cpu), for reporting

    @property
    def nbytes(self) -> int:
        return sum(t.numel() for t in self.planes.values())


def _host(t: torch.Tensor) -> torch.Tensor:
    """A host COPY: on a CPU device ``.cpu()`` returns the tensor itself, and a capture that aliases
    ``req_to_token`` would silently change when the row is handed to the next request."""
    return t.to("cpu", copy=True)


def _read(plane: Plane, slots: torch.Tensor) -> torch.Tensor:
    rows = plane.data[:, plane.units_of(slots)]
    return rows.reshape(plane.layers, slots.numel(), -1).cpu()


def capture_request(pools: Pools, req: Request) -> dict[str, Capture]:
    """Every component REQ holds, by component name."""
    out: dict[str, Capture] = {}
    slots = token_slots(pools, req)
    for sub in pools.sub_pools:
        where = slots
        if sub.label == "swa" and pools.full_to_swa is not None:
            mapped = pools.full_to_swa[slots]
            where = mapped[mapped > 0]
        for plane in sub.planes:
            cap = out.setdefault(plane.component, Capture({}, _host(where)))
            cap.planes[plane.name] = _read(plane, where)
    if pools.mamba is not None and req.mamba_slot is not None:
        slot = torch.tensor([req.mamba_slot], dtype=torch.int64, device=pools.device)
        for plane in pools.mamba.planes:
            cap = out.setdefault(plane.component, Capture({}, _host(slot)))
            cap.planes[plane.name] = _read(plane, slot)
    return out


def capture_padding(pools: Pools) -> Capture:
    """Slot 0 of every plane, row 0 of the request table, and the mapping entry of slot 0."""
    zero = torch.tensor([PADDING_SLOT], dtype=torch.int64, device=pools.device)
    planes = {f"{p.component}.{p.name}": _read(p, zero) for p in pools.all_planes()}
    planes["req_to_token[0]"] = _host(pools.req_to_token[0:1].view(torch.uint8).reshape(1, 1, -1))
    if pools.full_to_swa is not None:
        planes["full_to_swa[0]"] = _host(pools.full_to_swa[0:1].view(torch.uint8).reshape(1, 1, -1))
    return Capture(planes, zero.cpu())


def capture_free(
    pools: Pools, held: Iterable[dict[str, Capture]], states: list[torch.Tensor]
) -> dict[str, tuple[Capture, Capture]]:
    """Every slot no request ever held (slot 0 aside: ``padding_slot`` judges it), per component:
    what ``fill_background`` wrote there, redrawn from STATES, and what it holds now."""
    touched: dict[str, set[int]] = {}
    for caps in held:
        for comp, cap in caps.items():
            touched.setdefault(comp, set()).update(cap.slots.tolist())
    out: dict[str, tuple[Capture, Capture]] = {}
    for plane, state in zip(pools.all_planes(), states, strict=True):
        free = torch.ones(plane.data.shape[1] // plane.units_per_slot, dtype=torch.bool)
        free[PADDING_SLOT] = False
        free[sorted(touched.get(plane.component, ()))] = False
        slots = free.nonzero().flatten()
        if slots.numel() == 0:
            continue
        units = plane.units_of(slots.to(pools.device)).cpu()
        expected = background(plane, state)[:, units].reshape(plane.layers, slots.numel(), -1)
        was, now = out.setdefault(plane.component, (Capture({}, slots), Capture({}, slots)))
        was.planes[plane.name] = expected
        now.planes[plane.name] = _read(plane, slots.to(pools.device))
    return out


@dataclass
class Mismatch:
    """Where the first differing byte of a component was found."""

    rid: int | None
    plane: str
    layer: int
    position: int
    slot: int


@dataclass
class Tally:
    """Bytes compared and mismatched for one row of the report."""

    bytes: int = 0
    mismatched: int = 0
    first: Mismatch | None = None

    def add(self, rid: int | None, before: Capture, *after: Capture, prefix: str = "") -> None:
        for name, old in before.planes.items():
            self.bytes += old.numel()
            bad = torch.zeros(old.shape, dtype=torch.bool)
            for cap in after:
                new = cap.planes.get(name)
                if new is None or new.shape != old.shape:
                    bad |= True
                else:
                    bad |= new != old
            count = int(bad.sum())
            self.mismatched += count
            if count and self.first is None:
                layer, pos, _ = (int(i) for i in bad.nonzero()[0])
                slots = after[0].slots if after else before.slots
                slot = int(slots[pos]) if pos < slots.numel() else -1
                self.first = Mismatch(rid, prefix + name, layer, pos, slot)


@dataclass
class Observations:
    """Everything captured in one run, for the diff."""

    before: dict[int, dict[str, Capture]]  # rid -> component -> capture (before retraction / after write)
    at_visible: dict[int, dict[str, Capture]]  # restored rid -> captured when it became runnable
    after: dict[int, dict[str, Capture]]  # every live rid at the end
    retracted: list[int]
    residents: list[int]
    padding_before: Capture
    padding_after: Capture
    components: list[str]  # in StateSpec order
    layer_ids: dict[str, tuple[int, ...]] = field(default_factory=dict)
    free: dict[str, tuple[Capture, Capture]] = field(default_factory=dict)  # capture_free


def _ledger_counts(ledger: CopyLedger, component: str, rids: Iterable[int]) -> dict[str, object]:
    rid_set = set(rids)
    counts = {"out": {r: 0 for r in rid_set}, "in": {r: 0 for r in rid_set}}
    moved = {"out": 0, "in": 0}
    for comp, direction, rid, nbytes in ledger.events:
        if comp == component and rid in rid_set:
            counts[direction][rid] += 1
            moved[direction] += nbytes
    return {
        "copies_out": max(counts["out"].values(), default=0),
        "copies_in": max(counts["in"].values(), default=0),
        "min_copies_out": min(counts["out"].values(), default=0),
        "min_copies_in": min(counts["in"].values(), default=0),
        "bytes_out": moved["out"],
        "bytes_in": moved["in"],
    }


def _row(name: str, tally: Tally, ledger: dict[str, object] | None, layer_ids: tuple[int, ...]) -> dict:
    first = tally.first
    row = {
        "name": name,
        "bytes": tally.bytes,
        "mismatched_bytes": tally.mismatched,
        "equal": tally.mismatched == 0,
        "copies_out": ledger["copies_out"] if ledger else 0,
        "copies_in": ledger["copies_in"] if ledger else 0,
        "bytes_out": ledger["bytes_out"] if ledger else 0,
        "bytes_in": ledger["bytes_in"] if ledger else 0,
        "ledger_ok": True,
        "first_request": first.rid if first else None,
        "first_plane": first.plane if first else None,
        "first_layer": (layer_ids[first.layer] if first.layer < len(layer_ids) else first.layer) if first else None,
        "first_position": first.position if first else None,
        "first_slot": first.slot if first else None,
    }
    if ledger is not None:
        once = all(ledger[k] == 1 for k in ("copies_out", "copies_in", "min_copies_out", "min_copies_in"))
        row["ledger_ok"] = once and ledger["bytes_out"] == ledger["bytes_in"] == tally.bytes
    row["ok"] = row["equal"] and row["ledger_ok"]
    return row


def reused_slot(obs: Observations) -> Mismatch | None:
    """The first slot a restored request got back from before its retraction, if any.

    A restore into the very slots the request already held passes even when the backup lost
    everything (the old bytes are still there), so such a run proves nothing and is red.
    """
    for rid in obs.retracted:
        for comp, before in obs.before[rid].items():
            after = obs.after[rid].get(comp)
            if after is None:
                continue
            old = set(before.slots.tolist())
            for pos, slot in enumerate(after.slots.tolist()):
                if slot in old:
                    return Mismatch(rid, comp, 0, pos, int(slot))
    return None


def _slot_reuse_row(obs: Observations) -> dict:
    hit = reused_slot(obs)
    checked = sum(c.slots.numel() for rid in obs.retracted for c in obs.after[rid].values())
    row = _row(SLOT_REUSE, Tally(), None, ())
    fresh = hit is None and (checked > 0 or not obs.retracted)
    row.update(bytes=0, mismatched_bytes=0, equal=fresh, ok=fresh)
    if hit is not None:
        row.update(first_request=hit.rid, first_plane=hit.plane, first_position=hit.position, first_slot=hit.slot)
    return row


def diff(obs: Observations, ledger: CopyLedger) -> pd.DataFrame:
    """One row per component of the retracted requests, then the padding slot, the slots no request
    ever held, the residents, and whether every restored request landed in slots it did not hold
    before (``slot_reuse``)."""
    rows = []
    for comp in obs.components:
        tally = Tally()
        for rid in obs.retracted:
            before = obs.before[rid].get(comp)
            if before is None:
                continue
            after = [c for c in (obs.at_visible.get(rid, {}).get(comp), obs.after[rid].get(comp)) if c is not None]
            tally.add(rid, before, *(after or [Capture({}, before.slots)]))
        counts = _ledger_counts(ledger, comp, obs.retracted) if obs.retracted else None
        rows.append(_row(comp, tally, counts, obs.layer_ids.get(comp, ())))
    pad = Tally()
    pad.add(None, obs.padding_before, obs.padding_after)
    rows.append(_row(PADDING, pad, None, ()))
    free = Tally()
    for comp, (was, now) in obs.free.items():
        free.add(None, was, now, prefix=f"{comp}.")
    rows.append(_row(FREE, free, None, ()))
    resident = Tally()
    for rid in obs.residents:
        for comp, before in obs.before[rid].items():
            resident.add(rid, before, obs.after[rid].get(comp, Capture({}, before.slots)), prefix=f"{comp}.")
    rows.append(_row(RESIDENT, resident, None, ()))
    rows.append(_slot_reuse_row(obs))
    frame = pd.DataFrame(rows)
    for col in ("first_request", "first_layer", "first_position", "first_slot"):
        frame[col] = frame[col].astype("Int64")
    return frame


def failing(frame: pd.DataFrame) -> list[str]:
    return [str(n) for n in frame.loc[~frame["ok"], "name"]]
