"""SGLang's replay cases (``kvdoctor.core.replays``): public bugs replayed on real SGLang 0.5.23 servers on the CPU.

LFM2 (ShortConv + attention: recurrent state) and Llama, shrunk to tiny seeded random checkpoints; over PD with
Mooncake TCP for the transfer and the retraction, one server for the radix cache. A replay that needs no retraction
(the transfer, a prefix hit) runs in a scenario without it, so row 0's overlap finding (LFM2 over PD under decode
retraction is red by itself) cannot turn its control red; row 0 itself is replayed with no fault, its control
adding the workaround ``--disable-overlap-schedule``. ``PENDING``: cases whose fault is not registered yet.
"""

from __future__ import annotations

from kvdoctor.core.replays import RECURRENT, Expect, Outcome, Replay

__all__ = ["PENDING", "REPLAYS"]

LFM2 = "lfm2-1.2b"
LAGUNA = "laguna-all-swa"  # every layer sliding, a 64-token window: the SWA shape SGLang serves on a CPU
STATE_RED = Expect(Outcome.RED, RECURRENT)  # the tokens diverge, the recurrent state named
# Decodes past the window: SGLang evicts a request's window only once it passed it by its eviction interval (128
# tokens by default), so each request reaches 32 + 256 tokens.
PAST_THE_WINDOW = (("requests", 16), ("prompt_tokens", 32), ("max_new_tokens", 256))
# 4 conversations x 3 (turn 1, a hit, a warm hit) + refills, and the eviction wave between them: short turns, so
# each phase's hits are proven per request (tests/consistency/test_sglang_prefix_servers.py runs the same).
PREFIX_TURNS = (("requests", 12), ("prompt_tokens", 16), ("max_new_tokens", 16), ("concurrency", 8))
# Forced retraction over PD (tests/consistency/test_servers.py's workload): enough pressure that the tight decode
# retracts; LFM2 runs its conv through Triton's interpreter on a CPU, so no more than that.
RETRACTING = (("requests", 16), ("prompt_tokens", 16), ("max_new_tokens", 48), ("concurrency", 16))
# Every request crosses the transfer once: a few suffice (the fault fires on each).
TRANSFERRING = (("requests", 4), ("prompt_tokens", 16), ("max_new_tokens", 24), ("concurrency", 4))
CHUNK_CACHE = ("--disable-radix-cache",)  # SGLang's SWA chunk cache: the setting of sglang#23982 / sglang#8649
NO_OVERLAP = ("--disable-overlap-schedule",)  # row 0's workaround: LFM2 over PD is green under retraction with it

REPLAYS: tuple[Replay, ...] = (
    Replay(
        "kvdoctor#overlap",
        "sglang",
        LFM2,
        "pd",
        "preempt",
        None,
        STATE_RED,
        control_args=NO_OVERLAP,
        workload=RETRACTING,
        note="no fault: the real server is the subject; the control adds the workaround",
    ),
    Replay("sglang#23773", "sglang", LFM2, "pd", "transfer", "drop-pd-state", STATE_RED, workload=TRANSFERRING),
    Replay("sglang#32995", "sglang", LFM2, "pd", "transfer", "clear-pd-state", STATE_RED, workload=TRANSFERRING),
    Replay(
        "sglang#33385",
        "sglang",
        LFM2,
        "pd",
        "preempt",
        "retract-raise",
        Expect(Outcome.LOUD, line="NotImplementedError"),
        subject_args=NO_OVERLAP,
        control_args=NO_OVERLAP,
        workload=RETRACTING,
        note="loud: the decode scheduler dies at the first retraction backup (exit 3, the server's own line); last on "
        "row 0's control launch, whose overlap workaround keeps that control green",
    ),
    Replay(
        "sglang#29368", "sglang", LFM2, "single", "prefix-cache", "blank-state-on-hit", STATE_RED, workload=PREFIX_TURNS
    ),
    Replay(
        "sglang#31474", "sglang", LFM2, "single", "prefix-cache", "stale-state-on-hit", STATE_RED, workload=PREFIX_TURNS
    ),
    Replay(
        "sglang#16053",
        "sglang",
        LFM2,
        "single",
        "prefix-cache",
        "unwritten-checkpoint",
        STATE_RED,
        workload=PREFIX_TURNS,
    ),
    Replay(
        "sglang#29973",
        "sglang",
        LFM2,
        "single",
        "prefix-cache",
        "unwritten-checkpoint",
        STATE_RED,
        workload=PREFIX_TURNS,
    ),
    Replay(
        "sglang#23982",
        "sglang",
        LAGUNA,
        "single",
        "preempt",
        "swa-early-evict",
        Expect(Outcome.RED, ("swa_kv",)),  # the sliding-window KV the early eviction freed
        subject_args=CHUNK_CACHE,
        control_args=CHUNK_CACHE,
        workload=PAST_THE_WINDOW,
    ),
    Replay(
        "sglang#31486",
        "sglang",
        LAGUNA,
        "single",
        "preempt",
        None,
        Expect(Outcome.LOUD, line="pool memory leak detected"),
        control_args=CHUNK_CACHE,
        workload=PAST_THE_WINDOW,  # the control shares sglang#23982's launch
        note="no fault: live in 0.5.23 with the radix cache on (PureSWARadixCache); the control turns it off",
    ),
)

# Their faults are being built (issue 30); each moves to REPLAYS when its fault is registered.
PENDING: tuple[Replay, ...] = (
    Replay(
        "vllm#57908",
        "sglang",
        LFM2,
        "single",
        "prefix-cache",
        "shared-state-no-cow",
        STATE_RED,
        note="the bug's SGLang form: the hit shares the cached slot instead of copying it",
    ),
)
