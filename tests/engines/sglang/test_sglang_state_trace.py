"""The state trace against SGLang's own code, and issue 21 pinned (``make test-sglang``; no server).

1. The recorder (``kvdoctor.engines.sglang.digests``) reads every pool kind's host copy the way SGLang's
   ``get_cpu_copy`` writes it: through SGLang's ``backup_kv_cache``/``restore_kv_cache`` on SGLang's pools,
   the copy's digest equals the live slots' per component, and the restore's equals the copy's.
2. The CPU view of LFM2's conv backup is seen: the copy changes with the slot it came from.
3. Issue 21: under SGLang's overlap decode loop a request is retracted after the forward in flight has
   advanced its conv state in place, and that forward's token is dropped; SGLang's backup takes the
   advanced state, so the resumed request feeds the same position twice. The premise (the loop's order
   and the dropped token) is checked in the installed SGLang's source; the consequence, with SGLang's own
   conv kernel and backup/restore, is a strict xfail that turns into a failure when SGLang fixes it.
4. Every SGLang file:line the attribution prints names its symbol in the installed SGLang.
"""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path
from typing import Any

import pytest

from kvdoctor.consistency import attribution
from kvdoctor.consistency.compare import RequestDiff

pytestmark = pytest.mark.sglang

DECODE = ["--disaggregation-mode", "decode", "--disaggregation-decode-retraction-backup", "cpu_tensor"]
POOL_KINDS = [
    ("llama-3.1-8b", DECODE, {"full_kv"}),
    ("lfm2-1.2b", DECODE, {"full_kv", "conv_state"}),
    ("gpt-oss-20b", DECODE, {"full_kv", "swa_kv"}),
    (
        "inkling-small",
        ["--kv-cache-dtype", "mxfp8", *DECODE, "--page-size", "64"],
        {"full_kv", "full_kv_scales", "swa_kv", "swa_kv_scales", "conv_state"},
    ),
]
ISSUE_21 = (
    "issue 21 (SGLang's): the overlap decode loop retracts after the forward in flight advanced the conv state "
    "in place (sglang/srt/disaggregation/decode.py:3189-3218), drops that forward's token for the retracted "
    "request (sglang/srt/managers/scheduler_components/batch_result_processor.py:1021-1026), and "
    "Req.offload_kv_cache backs up the advanced state beside a KV one position shorter "
    "(sglang/srt/managers/schedule_batch.py:2109-2128): the resumed request feeds that position twice"
)


class Issue21(AssertionError):
    """The one failure the issue-21 pin expects; any other failure of that test is a real one."""


class Server:
    """SGLang's pools for one launch line, with SGLang's Req and backup chain (what a decode server holds)."""

    def __init__(self, model: str, argv: list[str]) -> None:
        from kvdoctor.engines.sglang import _pools, _runtime

        self.runtime = _runtime.resolve(model, argv)
        page = 64 if "--page-size" in argv else 1
        self.pools = _pools.build(
            self.runtime, _pools.PoolPlan(rows=4, pages=64 if page > 1 else 512, page_size=page), "cpu"
        )
        self.sched = _runtime.import_sglang("sglang.srt.managers.schedule_batch")
        self.sampling = _runtime.import_sglang("sglang.srt.sampling.sampling_params")
        self.common = _runtime.import_sglang("sglang.srt.mem_cache.common")

    def admit(self, rid: str, prompt: list[int], outputs: list[int], req: Any = None) -> Any:
        import torch

        p = self.pools
        if req is None:
            req = self.sched.Req(rid, "", list(prompt), self.sampling.SamplingParams())
            req.output_ids.extend(outputs)
        n = req.seqlen
        assert p.req_to_token_pool.alloc([req]) is not None
        if p.page_size == 1:
            loc = p.allocator.alloc(n)
        else:
            zero = torch.zeros(1, dtype=torch.int64)
            lens = torch.tensor([n], dtype=torch.int64)
            loc = p.allocator.alloc_extend(zero, zero, lens, lens, torch.full((1,), -1, dtype=torch.int64), n)
        assert loc is not None
        p.req_to_token_pool.write((req.kv.req_pool_idx, slice(0, n)), loc.to(torch.int32))
        req.kv.kv_allocated_len = n
        return req

    def release(self, req: Any) -> None:
        p = self.pools
        p.allocator.free(p.req_to_token_pool.req_to_token[req.kv.req_pool_idx, : req.seqlen].to(torch_int64()))
        if req.kv.mamba_pool_idx is not None:
            p.req_to_token_pool.free_mamba_cache(req)
        p.req_to_token_pool.free(req)

    def backup(self, rec: Any, req: Any) -> None:
        p = self.pools
        ok = rec.backup(
            req,
            p.req_to_token_pool,
            p.allocator,
            lambda: self.common.backup_kv_cache(req, None, p.req_to_token_pool, p.allocator, "cpu_tensor"),
        )
        assert ok is True

    def restore(self, rec: Any, req: Any) -> None:
        p = self.pools
        rec.restore(
            req,
            p.req_to_token_pool,
            p.allocator,
            lambda: self.common.restore_kv_cache(req, None, p.req_to_token_pool, p.allocator, "cpu_tensor"),
        )

    def fill_random(self) -> None:
        import torch

        from kvdoctor.engines.sglang._planes import planes_of

        g = torch.Generator().manual_seed(0)
        for plane in planes_of(self.pools):
            for buf in plane.buffers:
                raw = buf.view(torch.uint8)
                raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=g))


def torch_int64() -> Any:
    import torch

    return torch.int64


def _recorder(path: Path, keep_bytes: int = 0) -> Any:
    from kvdoctor.engines.sglang.digests import Recorder

    def fail(message: str) -> None:
        raise AssertionError(message)

    return Recorder(str(path), fail, keep_bytes)


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize(("model", "argv", "expected"), POOL_KINDS, ids=[m for m, _, _ in POOL_KINDS])
def test_every_pool_kinds_copy_is_digested_as_sglang_writes_it(
    tmp_path: Path, model: str, argv: list[str], expected: set[str]
) -> None:
    server = Server(model, argv)
    server.fill_random()
    rec = _recorder(tmp_path / "d.jsonl")
    req = server.admit("a", list(range(4, 40)), [7, 8, 9])
    server.backup(rec, req)
    server.release(req)
    req.reset_for_retract()
    server.admit("a", [], [], req=req)
    server.restore(rec, req)
    backup, restore = _events(tmp_path / "d.jsonl")
    assert set(backup["live"]) == expected, backup["live"]
    assert backup["copy"] == backup["live"] and all(int(v.split(":")[1]) > 0 for v in backup["copy"].values())
    assert restore["held"] == backup["copy"] and restore["live"] == backup["copy"]
    assert backup["kv_tokens"] == restore["kv_tokens"] == 38


def test_the_cpu_view_of_lfm2s_conv_backup_is_named_when_its_slot_is_reused(tmp_path: Path) -> None:
    import torch

    server = Server("lfm2-1.2b", DECODE)
    server.fill_random()
    rec = _recorder(tmp_path / "d.jsonl")
    prompt = list(range(4, 20))
    req = server.admit("a", prompt, [5, 6])
    old = int(req.kv.mamba_pool_idx)
    server.backup(rec, req)
    server.release(req)
    req.reset_for_retract()
    for conv in server.pools.mamba_pool.mamba_cache.conv:  # the freed slot's next owner writes its own state
        conv[:, old] = torch.randn(conv[:, old].shape)
    server.admit("a", [], [], req=req)
    server.restore(rec, req)
    _as_scheduler_would(tmp_path / "d.jsonl")
    diff = RequestDiff(0, 8, 8, 3, True, position=3)
    trace = attribution.attribute(tmp_path / "d.jsonl", [prompt], [diff])
    t = trace.requests[0]
    assert (t.verdict, t.component, t.seam) == ("held_changed", "conv_state", "restore 1"), t.issues
    assert "a view of the live pool" in t.detail and any("memory_pool.py:1208-1221" in c for c in t.cite)


def _as_scheduler_would(path: Path) -> None:
    """What the scheduler hook adds (no scheduler runs here): its schedule, and the next forward reading the
    restored slots unchanged at the position the restored KV ends."""
    restore = _events(path)[-1]
    forward = {**restore, "event": "forward", "t": restore["t"] + 1, "fed": restore["kv_tokens"]}
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"event": "scheduler", "t": 0.0, "overlap": True}) + "\n")
        fh.write(json.dumps(forward) + "\n")


def test_issue_21_premise_the_overlap_loop_retracts_before_it_processes_the_previous_batch() -> None:
    """Green while SGLang 0.5.23's order holds; red when it changes: then re-check issue 21 (matrix test)."""
    from kvdoctor.engines.sglang._runtime import import_sglang

    decode = import_sglang("sglang.srt.disaggregation.decode")
    loop = inspect.getsource(decode.SchedulerDisaggregationDecodeMixin.event_loop_overlap_disagg_decode)
    schedule = loop.index("self.get_next_disagg_decode_batch_to_run(")
    launch = loop.index("self.run_batch(batch)")
    last = loop.index("# Process the last batch")
    assert schedule < launch < last and "pop_and_process()" in loop[last:]
    processor = import_sglang("sglang.srt.managers.scheduler_components.batch_result_processor")
    source = inspect.getsource(processor.SchedulerBatchResultProcessor.process_batch_result_decode)
    assert "req.finished() or req.is_retracted" in source and "self.enable_overlap" in source
    offload = inspect.getsource(import_sglang("sglang.srt.managers.schedule_batch").Req.offload_kv_cache)
    assert ": self.seqlen - 1" in offload


def _resume(
    tmp_path: Path, *, in_flight: bool, states: dict[str, Any] | None = None
) -> tuple[Any, Any, dict[str, Any]]:
    """SGLang's LFM2 pools, SGLang's conv decode kernel (in place, as LFM2's ShortConv calls it), SGLang's backup
    and restore. A request at seqlen 6 (positions 0-4 absorbed, 5 next) is retracted, restored into new slots and
    fed position 5: (what that forward computed, what it computes had the request never been retracted, the
    backup's trace). IN_FLIGHT: in the overlap loop's order, the forward of position 5 ran before the
    retraction and its token was dropped."""
    import torch

    from kvdoctor.engines.sglang._runtime import import_sglang

    conv1d = import_sglang("sglang.srt.layers.attention.mamba.causal_conv1d")
    server = Server("lfm2-1.2b", DECODE)
    state = server.pools.mamba_pool.mamba_cache.conv[0][0]  # layer 0: (slots, dim, L_cache - 1), as lfm2.py reads it
    dim, width = state.shape[1], state.shape[2] + 1
    g = torch.Generator().manual_seed(21)
    weight = torch.randn(dim, width, generator=g)
    xs = torch.randn(6, dim, generator=g)

    def feed(x: torch.Tensor, slot: int) -> torch.Tensor:
        idx = torch.tensor([slot], dtype=torch.int32)
        return conv1d.causal_conv1d_update(x[None], state, weight, None, activation=None, conv_state_indices=idx)[0]

    req = server.admit("a", list(range(4, 8)), [9, 10])
    slot = int(req.kv.mamba_pool_idx)
    state[slot].zero_()
    for x in xs[:5]:
        feed(x, slot)
    absorbed = state[slot].clone()
    expected = feed(xs[5], slot)  # never retracted: position 5 fed once
    if states is not None:  # the state after 5 and after 6 positions, what a reference decode would keep
        states |= {"after 5": absorbed.clone(), "after 6": state[slot].clone()}
    state[slot] = absorbed
    if in_flight:
        feed(xs[5], slot)  # the forward in flight at retraction advances the state in place; its token is dropped
    rec = _recorder(tmp_path / "d.jsonl", keep_bytes=1 << 20 if states is not None else 0)
    server.backup(rec, req)
    server.release(req)
    req.reset_for_retract()
    server.admit("a", [], [], req=req)
    server.restore(rec, req)
    got = feed(xs[5], int(req.kv.mamba_pool_idx))  # the resumed request feeds position 5
    return got, expected, _events(tmp_path / "d.jsonl")[0]


TRITON = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="LFM2's conv kernel needs TRITON_INTERPRET=1"
)


@TRITON
def test_a_request_retracted_between_forwards_resumes_from_its_own_state(tmp_path: Path) -> None:
    """The control of the pin below: the same kernel, backup and restore, with no forward in flight."""
    import torch

    got, expected, backup = _resume(tmp_path, in_flight=False)
    assert backup["kv_tokens"] == 5 and backup["copy"] == backup["live"]
    assert torch.equal(got, expected)


@TRITON
@pytest.mark.xfail(strict=True, raises=Issue21, reason=ISSUE_21)
def test_issue_21_a_request_retracted_with_its_forward_in_flight_resumes_from_its_own_state(tmp_path: Path) -> None:
    import torch

    got, expected, backup = _resume(tmp_path, in_flight=True)
    assert backup["kv_tokens"] == 5 and backup["copy"] == backup["live"]  # the bytes themselves moved intact
    if not torch.equal(got, expected):  # only this, not a failure on the way, is the expected red
        raise Issue21("the resumed forward read a conv state one position ahead")


@TRITON
@pytest.mark.parametrize(("in_flight", "holds"), [(False, "after 5"), (True, "after 6")])
def test_the_backup_s_kept_bytes_are_the_state_after_the_positions_it_absorbed(
    tmp_path: Path, in_flight: bool, holds: str
) -> None:
    """Issue 31's proof from the bytes, on SGLang's own kernel, pools and backup: the bytes the recorder keeps of a
    backup equal the state after 5 positions between forwards, after 6 with a forward in flight (while the KV backup
    holds 5 either way); the other position's state is far from them."""
    import torch

    from kvdoctor.consistency import state_bytes

    states: dict[str, Any] = {}
    _, _, backup = _resume(tmp_path, in_flight=in_flight, states=states)
    assert backup["kv_tokens"] == 5
    kept = state_bytes._Store(tmp_path / "d.jsonl", None).read(backup["bytes"])
    assert kept is not None and list(kept) == ["conv_state"]
    layer0 = torch.from_numpy(kept["conv_state"][: states[holds].numel()].copy()).reshape(states[holds].shape)
    other = "after 6" if holds == "after 5" else "after 5"
    assert torch.equal(layer0, states[holds].float())
    assert not torch.allclose(layer0, states[other].float(), atol=1e-3)


def test_every_file_line_the_attribution_prints_names_its_symbol_in_the_installed_sglang() -> None:
    import importlib.util
    import re

    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.origin
    root = Path(spec.origin).parent
    cites = {c for group in attribution.CITES.values() for c in group}
    assert len(cites) >= 7
    for c in cites:
        lines = (root / c.path).read_text(encoding="utf-8").splitlines()
        assert 1 <= c.start <= c.end <= len(lines), c
        text = "\n".join(lines[c.start - 1 : c.end])
        named = re.search(rf"(?<![A-Za-z0-9_]){re.escape(c.symbol)}(?![A-Za-z0-9_])", text)
        assert named, f"{c.where} does not name {c.symbol!r}:\n{text}"
