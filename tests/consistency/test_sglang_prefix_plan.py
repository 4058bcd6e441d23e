"""``kvdoctor consistency --server sglang --scenario prefix-cache`` without a server: the plan (one pool, the radix
cache off for the reference only), the refusals (exit 2, one line, before any work), the conversations' phases, the
hit evidence (``meta_info.cached_tokens``, ``sglang:cached_tokens_total``), the gate that turns a missed hit red and
the radix-hit faults' fired gate (the real runs are in test_sglang_prefix_servers.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from kvdoctor._exceptions import EXIT_GATE, EXIT_INPUT, EXIT_PASS, MalformedReply
from kvdoctor.cli.app import app
from kvdoctor.cli.consistency import print_result
from kvdoctor.consistency import deploy, report, run
from kvdoctor.consistency.client import parse
from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.fault_gate import fault_fired_from
from kvdoctor.consistency.probe_vllm import PrefixCacheCount
from kvdoctor.consistency.result import FaultReport
from kvdoctor.consistency.scenarios.prefix_cache import PrefixCacheResult
from kvdoctor.consistency.servers.sglang import prefix_cache as pc
from kvdoctor.consistency.workload import Workload
from kvdoctor.engines import hook_log
from tests.schema_check import assert_valid

SMALL = ("--requests", "12", "--prompt-tokens", "16", "--max-new-tokens", "16", "--concurrency", "8")


def _prepared(model: str = "llama-3.1-8b", **kw: object) -> run.Prepared:
    w = Workload(12, 16, 16, 8)
    return run.prepare(run.ConsistencyOptions(model, shrink=True, scenario="prefix-cache", workload=w, **kw))  # type: ignore[arg-type]


# ---- the plan ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["llama-3.1-8b", "lfm2-1.2b"])
def test_the_reference_runs_without_the_radix_cache_and_nothing_else_differs(model: str) -> None:
    prepared = _prepared(model)
    plan = run.plan_for(prepared, "/ckpt", None)
    ref, subject = plan.steps
    assert "--disable-radix-cache" in ref.argv and "--disable-radix-cache" not in subject.argv

    def rest(argv: tuple[str, ...]) -> list[str]:
        out = [a for a in argv if a != "--disable-radix-cache"]
        i = out.index("--port")
        return out[:i] + out[i + 2 :]

    assert rest(ref.argv) == rest(subject.argv), "one pool, the same flags (overlap schedule off for both)"
    assert plan.reference_pool == plan.pressured_pool == pc.pool_tokens(prepared.options.workload)
    assert "--disable-overlap-schedule" in subject.argv
    assert ref.env == subject.env and "KVDOCTOR_INJECT" not in subject.env and plan.injected_role is None


def test_the_pool_holds_every_cached_conversation_and_every_request_in_flight() -> None:
    w = Workload(12, 16, 16, 8)
    longest = pc.PREFIX_TOKENS + 2 * 16 + 16
    cached = pc.GROUPS * (pc.PREFIX_TOKENS + 16 + 16) + 4 * (16 + 16)  # turn 1 + each hit's own tokens
    assert pc.pool_tokens(w) == cached + (w.in_flight + 1) * longest


def test_a_radix_hit_fault_runs_in_the_subject_only_and_is_armed_by_the_run() -> None:
    prepared = _prepared("lfm2-1.2b", inject="blank-state-on-hit")
    plan = run.plan_for(prepared, "/ckpt", Path("/run"))
    ref, subject = plan.steps
    assert subject.env["KVDOCTOR_INJECT"] == "blank-state-on-hit" and "KVDOCTOR_INJECT" not in ref.env
    assert plan.injected_role == "pressured" and plan.arm_file == "/run/armed"
    assert subject.env["KVDOCTOR_ARM"] == "/run/armed" and "PYTHONPATH" in subject.env
    assert "site_hook" in subject.env["PYTHONPATH"]


def test_a_retraction_fault_on_one_server_is_still_refused_by_the_plan() -> None:
    o = deploy.DeployOptions("/m", "single", "cpu", Workload(), has_recurrent=True, inject="missing-mamba")
    with pytest.raises(Exception, match="needs --topology pd"):
        deploy.build(o, [1, 2])
    hit = deploy.build(
        deploy.DeployOptions("/m", "single", "cpu", Workload(), True, inject="stale-state-on-hit"), [1, 2]
    )
    assert hit.injected_role == "pressured"


# ---- the refusals ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "args", "words"),
    [
        ("llama-3.1-8b", ["--topology", "pd"], "runs --topology single"),
        ("llama-3.1-8b", ["--requests", "8"], "needs --requests >= 12"),
        ("llama-3.1-8b", ["--", "--disable-radix-cache"], "--disable-radix-cache after -- is not allowed"),
        ("llama-3.1-8b", ["--", "--disable-radix"], "--disable-radix after -- is not allowed"),  # a prefix
        ("lfm2-1.2b", ["--", "--disable-overlap-schedule"], "not allowed with --scenario prefix-cache"),
        (
            "lfm2-1.2b",
            ["--", "--mamba-radix-cache-strategy", "extra_buffer"],
            "sglang/srt/arg_groups/mamba_hook.py:117-119",
        ),
        ("lfm2-1.2b", ["--", "--mamba-radix-cache-strategy=extra_buffer_lazy"], "mamba_hook.py:102-112"),
        ("llama-3.1-8b", ["--", "--mamba-radix-cache-strategy", "extra_buffer"], "model_hook.py:1062-1066"),
        ("llama-3.1-8b", ["--inject", "blank-state-on-hit"], "needs recurrent"),
        ("lfm2-1.2b", ["--inject", "drop-kv"], "would never fire"),
        ("lfm2-1.2b", ["--inject", "missing-mamba"], "would never fire"),
    ],
)
def test_what_the_scenario_cannot_take_is_one_line_and_exit_2(
    model: str, args: list[str], words: str, tmp_path: Path
) -> None:
    base = ["consistency", model, "--shrink", "--scenario", "prefix-cache", "--output-dir", str(tmp_path)]
    got = CliRunner().invoke(app, [*base, *SMALL[:0], *args] if "--requests" in args else [*base, *SMALL, *args])
    lines = [line for line in got.output.splitlines() if line.strip()]
    assert got.exit_code == EXIT_INPUT, got.output
    assert len(lines) == 1 and lines[0].startswith("kvdoctor: error:") and words in lines[0], lines
    assert not list(tmp_path.iterdir()), "refused before any work"


def test_a_radix_hit_fault_outside_the_scenario_is_refused() -> None:
    got = CliRunner().invoke(app, ["consistency", "lfm2-1.2b", "--shrink", "--inject", "stale-state-on-hit"])
    assert got.exit_code == EXIT_INPUT and "needs --scenario prefix-cache" in got.output, got.output


@pytest.mark.parametrize("strategy", ["auto", "no_buffer"])
def test_the_strategies_sglang_serves_on_a_cpu_plan(strategy: str, tmp_path: Path) -> None:
    args = ["consistency", "lfm2-1.2b", "--shrink", "--scenario", "prefix-cache", *SMALL, "--dry-run"]
    got = CliRunner().invoke(
        app, [*args, "--output-dir", str(tmp_path), "--", "--mamba-radix-cache-strategy", strategy]
    )
    assert got.exit_code == EXIT_PASS, got.output
    assert pc.strategy(("--mamba-radix-cache-strategy", strategy), True) == "no_buffer"
    assert pc.strategy((), False) is None


# ---- the workload ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("recurrent", [False, True])
def test_the_phases_are_conversations_whose_follow_ups_extend_turn_one(recurrent: bool) -> None:
    w = Workload(12, 16, 16, 8)
    pw = pc.build(w, 1000, recurrent)
    assert [ph.name for ph in pw.phases] == ["fill", "hit", "evict", "refill", "warm"]
    assert [ph.compared for ph in pw.phases] == [True, True, False, True, True]
    fill, hit, evict, refill, warm = pw.phases
    assert fill.prompts == refill.prompts and len(set(fill.prompts)) == pc.GROUPS
    for ph in (hit, warm):
        assert set(ph.groups) == set(range(pc.GROUPS)), "every conversation is hit, and hit again after eviction"
        for g, prompt in zip(ph.groups, ph.prompts, strict=True):
            turn1 = fill.prompts[g]
            assert prompt[: len(turn1)] == turn1 and len(prompt) == len(turn1) + w.prompt_tokens
    assert len(pw.compared) == w.requests + pc.GROUPS and len({tuple(p) for p in hit.prompts + warm.prompts}) == 8
    assert evict.max_new_tokens == 1 and not any(
        p[: pc.PREFIX_TOKENS] in {f[: pc.PREFIX_TOKENS] for f in fill.prompts} for p in evict.prompts
    )
    tokens = len(evict.prompts) * len(fill.prompts[0])
    assert tokens >= pc.pool_tokens(w) + w.in_flight * len(fill.prompts[0]), "the wave overflows the pool"
    if recurrent:
        assert len(evict.prompts) >= deploy.MAMBA_SLOTS + w.in_flight, "and every recurrent-state slot"
    assert pc.build(w, 1000, recurrent) == pw, "seeded"


# ---- the evidence ------------------------------------------------------------------------------------------


def _reply(cached: object) -> dict[str, object]:
    meta = {"output_token_logprobs": [[-0.5, 7, None]], "finish_reason": {"type": "length"}, "cached_tokens": cached}
    return {"output_ids": [7], "meta_info": meta}


def test_each_reply_says_its_cached_tokens_and_a_malformed_count_is_refused() -> None:
    assert parse(_reply(48)).cached_tokens == 48
    assert parse(_reply(0)).cached_tokens == 0
    reply = _reply(0)
    del reply["meta_info"]["cached_tokens"]  # type: ignore[attr-defined]
    assert parse(reply).cached_tokens is None
    for bad in (-1, "3", True, 1.5):
        with pytest.raises(MalformedReply, match=r"meta_info\.cached_tokens"):
            parse(_reply(bad))


PAGE = """# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{is_streaming="false",model_name="m"} 300.0
# HELP sglang:cached_tokens_total Number of cached prompt tokens by source (device/host/storage).
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{cache_source="device",model_name="m"} 96.0
sglang:cached_tokens_total{cache_source="host",model_name="m"} 4.0
"""


def test_the_counter_sums_every_source_and_a_server_that_never_hit_counted_zero() -> None:
    assert pc.from_prometheus(PAGE) == (100, 300)
    never_hit = "\n".join(line for line in PAGE.splitlines() if "cached_tokens" not in line)
    assert pc.from_prometheus(never_hit) == (0, 300), "SGLang counts cached tokens only once a request hit"
    assert pc.from_prometheus("# nothing\n") == (None, None), "no counters: unknown, never 0"


def _gens(n: int) -> list[Generation]:
    return [Generation(tuple(range(i, i + 4)), (-1.0,) * 4, (0.5,) * 4) for i in range(n)]


def _judged(cached: list[int], ref_hits: int = 0, subject_hits: int = 100) -> PrefixCacheResult:
    pw = pc.build(Workload(12, 16, 16, 8), 1000, True)
    got = [Generation(g.tokens, g.logprobs, g.margins, "length", c) for g, c in zip(_gens(16), cached, strict=True)]
    counts = (PrefixCacheCount(ref_hits, 0, "metrics"), PrefixCacheCount(subject_hits, 99, "metrics"))
    w = Workload(12, 16, 16, 8).to_dict()
    r = PrefixCacheResult("m", "lfm2", "single", "cpu", True, w, retractions={"reference": 0, "pressured": 0})
    r = pc.record(r, pw, *counts, got, "no_buffer")
    return run.evaluate(r, _gens(16), _gens(16), got, stand_in_used=False, prefix_hits=counts)  # type: ignore[return-value]


# per compared request, in order: fill x4, hit x4, refill x4, warm x4
HIT = [0] * 4 + [48] * 4 + [0] * 4 + [48] * 4


def test_every_hit_and_warm_request_hit_and_the_reference_none_is_green() -> None:
    r = _judged(HIT)
    assert r.exit_code == EXIT_PASS, r.message
    doc = r.prefix_cache
    assert doc["by_phase"]["hit"]["hit_requests"] == doc["by_phase"]["warm"]["hit_requests"] == 4
    assert doc["mamba_cache_mode"] == {"reference": None, "pressured": "no_buffer"}
    assert doc["recomputed_after_eviction"] == 4


@pytest.mark.parametrize("missed", [5, 13])  # a hit-phase request, a warm-phase request
def test_a_hit_or_warm_request_that_read_nothing_cached_is_red(missed: int) -> None:
    cached = list(HIT)
    cached[missed] = 0
    r = _judged(cached)
    gate = next(g for g in r.gates if g.name == "prefix-cache")
    assert r.exit_code == EXIT_GATE and not gate.passed and "1 of the 8 hit-phase requests" in gate.message


def test_a_reference_that_hit_is_red() -> None:
    r = _judged(HIT, ref_hits=16)
    assert r.exit_code == EXIT_GATE and "the reference hit" in r.message


# ---- the fault-fired gate ----------------------------------------------------------------------------------


def _log(tmp_path: Path, *lines: str) -> hook_log.EventLog:
    path = tmp_path / "site-hook.log"
    path.write_text("".join(f"1 {line}\n" for line in lines), encoding="utf-8")
    return hook_log.read(path)


def _faulted(name: str) -> PrefixCacheResult:
    r = _judged(HIT)
    return PrefixCacheResult(**{**r.__dict__, "fault": FaultReport(name, "pressured", installed=True)})


def test_a_radix_hit_fault_that_never_fired_is_red_not_a_caught_fault(tmp_path: Path) -> None:
    log = _log(tmp_path, "fault-installed blank-state-on-hit on ScheduleBatch", "fault-fired stale-state-on-hit x")
    r = fault_fired_from(log, _faulted("blank-state-on-hit"), "sglang")
    gate = next(g for g in r.gates if g.name == "fault-fired")
    assert r.exit_code == EXIT_GATE and not gate.passed and gate.reason == "no_teeth"
    assert r.fault is not None and r.fault.restores == 0


def test_a_radix_hit_fault_that_fired_is_counted(tmp_path: Path) -> None:
    installed = "fault-installed blank-state-on-hit on ScheduleBatch._collect_deferred_mamba_cow_and_clear"
    log = _log(tmp_path, installed, *["fault-fired blank-state-on-hit rid=a cached=32 copy-on-write -> clear"] * 3)
    r = fault_fired_from(log, _faulted("blank-state-on-hit"), "sglang")
    gate = next(g for g in r.gates if g.name == "fault-fired")
    assert gate.passed and "3 radix-cache hit" in gate.message and r.fault is not None and r.fault.restores == 3


def test_other_faults_get_no_radix_gate(tmp_path: Path) -> None:
    r = _faulted("drop-kv")
    assert fault_fired_from(_log(tmp_path), r, "sglang") is r


def test_the_json_of_an_sglang_prefix_cache_run_is_declared() -> None:
    doc = json.loads(json.dumps(report.json_document(_judged(HIT)), default=str))
    assert_valid(doc, "consistency")
    assert [p["name"] for p in doc["prefix_cache"]["workload"]["phases"]] == ["fill", "hit", "evict", "refill", "warm"]


# ---- the terminal ------------------------------------------------------------------------------------------


def test_the_result_lines_name_sglang_s_radix_cache_not_vllm_s_prefix_caching() -> None:
    """The golden of SGLang's prefix-cache finding (its part's words: the radix cache, its counter, the replies'
    ``meta_info``), printed where vLLM's prefix-caching line is printed for vLLM; none of vLLM's words."""
    console = Console(record=True, width=400)
    print_result(console, _judged(HIT))
    lines = console.export_text().splitlines()
    assert lines[:2] == [
        "retractions: reference 0, pressured 0 (from none)",
        "radix-cache hit tokens: reference 0, pressured 100 of 99 prompt tokens (from metrics: "
        "sglang:cached_tokens_total); requests that hit (meta_info.cached_tokens), per phase: fill 0/4, hit 4/4, "
        "refill 0/4, warm 4/4; recomputed after eviction: 4; radix cache: reference disabled, pressured enabled; "
        "recurrent-state strategy (--mamba-radix-cache-strategy): pressured no_buffer",
    ]
    assert not any("vllm" in line or "prefix caching as served" in line for line in lines)
