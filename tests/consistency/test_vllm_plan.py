"""``kvdoctor consistency --server vllm`` without a server: the plan, the refusals, the probe, the client's
parsing, the plugin's fault and the gates it feeds (the real runs are in test_vllm_servers.py)."""

from __future__ import annotations

import dataclasses
import json
import sys
import types
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from kvdoctor._exceptions import EXIT_GATE, EXIT_INPUT, InputError
from kvdoctor.cli.app import app
from kvdoctor.consistency import gates, probe_vllm, run
from kvdoctor.consistency.client import completion_body, parse_completion
from kvdoctor.consistency.result import ConsistencyResult, FaultReport
from kvdoctor.consistency.servers.vllm import deployment as vllm_room
from kvdoctor.consistency.servers.vllm import plan as deploy_vllm
from kvdoctor.consistency.shrink import shrink
from kvdoctor.consistency.workload import Workload
from kvdoctor.core.config import load_config
from kvdoctor.core.vllm.consistency_facts import MAMBA_STATE as VLLM_MAMBA_STATE
from kvdoctor.deploy.metrics import CounterWentBackwards, MalformedMetric
from kvdoctor.engines.vllm import server_plugin


def _options(model: str = "llama-3.1-8b", server: str = "sglang", **kw: object) -> deploy_vllm.VllmDeployOptions:
    """MODEL shrunk as for SERVER (the default, SGLang's shrink, keeps a Mamba2 state at full size)."""
    loaded = load_config(model)
    config = shrink(dict(loaded.top), server=server)
    return deploy_vllm.VllmDeployOptions("/ckpt", "cpu", Workload(), config, loaded.source, **kw)


def _flag(argv: tuple[str, ...], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# ---- the plan ----------------------------------------------------------------------------------------------


def test_pools_come_from_the_grouping_model_pressured_below_demand_reference_above() -> None:
    sized = deploy_vllm.pools(_options())
    assert sized.block_size == 32 and sized.per_request_blocks == 3  # 32 + 64 tokens in blocks of 32
    demand = Workload().in_flight * sized.per_request_blocks
    assert sized.pressured_blocks < demand, "the pressured pool must be too small for the concurrent demand"
    assert sized.pressured_blocks > sized.per_request_blocks, "one request must still fit"
    assert sized.reference_blocks >= 2 * demand, "the reference must never preempt"


def test_the_two_servers_differ_only_in_pool_and_port_and_only_pressured_gets_the_fault() -> None:
    dep = deploy_vllm.build(_options(inject="drop-kv", plugin_log="/run/vllm-plugin.log"), [4001, 4002])
    ref, press = dep.steps
    assert (ref.role, press.role) == ("reference", "pressured")
    sized = deploy_vllm.pools(_options())
    assert _flag(ref.argv, "--num-gpu-blocks-override") == str(sized.reference_blocks)
    assert _flag(press.argv, "--num-gpu-blocks-override") == str(sized.pressured_blocks)

    def strip(argv: tuple[str, ...]) -> list[str]:
        out = list(argv)
        for flag in ("--num-gpu-blocks-override", "--port"):
            i = out.index(flag)
            del out[i : i + 2]
        return out

    assert strip(ref.argv) == strip(press.argv)
    assert _flag(press.argv, "--max-num-seqs") == str(Workload().in_flight)
    assert press.env[server_plugin.INJECT_ENV] == "drop-kv" and server_plugin.INJECT_ENV not in ref.env
    assert press.env[server_plugin.LOG_ENV] == "/run/vllm-plugin.log"
    assert dep.injected_role == "pressured" and dep.pressured_pool == sized.tokens(sized.pressured_blocks)


def test_a_mamba_hybrid_is_served_without_prefix_caching() -> None:
    o = _options("nemotron-h-8b")
    assert "--no-enable-prefix-caching" in deploy_vllm._flags(o)
    assert "--no-enable-prefix-caching" not in deploy_vllm._flags(_options())
    assert any(e.name == "--no-enable-prefix-caching" for e in deploy_vllm.enablers(o))


def test_a_workload_vllm_cannot_preempt_is_refused_with_the_block_that_stops_it() -> None:
    """Measured: a NemotronH shrunk with its full-size Mamba state (SGLang's shrink) has its attention blocks padded
    to 8448 tokens (vLLM's log said the same), so a 96-token request never grows a block and vLLM queued it,
    0 preemptions, a run that proved nothing."""
    with pytest.raises(InputError, match=r"cannot preempt this workload: its attention blocks are 8448 tokens"):
        deploy_vllm.pools(_options("nemotron-h-8b"))
    long = dataclasses.replace(_options("nemotron-h-8b"), workload=Workload(max_new_tokens=8448))
    sized = deploy_vllm.pools(long)
    assert any("MambaSpec" in g and "1/request" in g for g in sized.groups)
    assert sized.pressured_blocks < Workload().in_flight * sized.per_request_blocks


def test_the_vllm_shrink_keeps_a_nemotron_h_attention_block_small_enough_to_grow() -> None:
    """--shrink --server vllm: the small Mamba state leaves vLLM's 32-token CPU block, so each 32 + 64-token request
    grows two attention blocks while it decodes and the pressured pool must preempt."""
    sized = deploy_vllm.pools(_options("nemotron-h-8b", server="vllm"))
    assert sized.block_size == 32
    assert sorted(sized.groups) == [
        "group 0: MambaSpec, block 96 tokens, 1 layers, 1/request",  # without prefix caching: max_model_len
        "group 1: FullAttentionSpec, block 32 tokens, 1 layers, 3/request",
    ]
    demand = Workload().in_flight * sized.per_request_blocks
    assert sized.per_request_blocks < sized.pressured_blocks < demand <= sized.reference_blocks


def test_the_vllm_shrinks_small_state_is_named_with_the_block_it_leaves() -> None:
    def named(o: deploy_vllm.VllmDeployOptions) -> list[str]:
        return [f"{e.name}: {e.why}" for e in deploy_vllm.enablers(o) if "Mamba state" in e.name]

    (line,) = named(_options("nemotron-h-8b", server="vllm", shrunk=True))
    assert line.startswith("--shrink Mamba state: 8 heads x 16 x 16, 1 group")
    assert "this state (10,112 B) leaves attention blocks of 32 tokens" in line
    assert named(_options("nemotron-h-8b", server="vllm")) == [], "a config the user gave is not called shrunk"
    assert named(_options(server="vllm", shrunk=True)) == [], "a model without Mamba state has nothing to name"


def test_consistency_shrinks_a_hybrid_for_vllm_and_plans_it_with_the_fault() -> None:
    """The command path: prepare shrinks for vLLM (else the refusal above), and zero-state is accepted."""
    o = run.ConsistencyOptions("nemotron-h-8b", shrink=True, server="vllm", inject="zero-state")
    prepared = run.prepare(o)
    assert {k: prepared.config[k] for k in VLLM_MAMBA_STATE} == VLLM_MAMBA_STATE
    dep = run.plan_for(prepared, "/ckpt", None)
    ref, press = dep.steps
    assert press.env[server_plugin.INJECT_ENV] == "zero-state" and server_plugin.INJECT_ENV not in ref.env
    assert any(e.name.startswith("--shrink Mamba state") for e in dep.enablers)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"topology": "pd"}, "--topology single only"),
        ({"inject": "missing-mamba"}, "not a vLLM fault"),
        ({"inject": "zero-state"}, "needs a model with recurrent state"),
        ({"extra_args": ("--mem-fraction-static", "0.3")}, "--mem-fraction-static"),
        ({"extra_args": ("--num-gpu-blocks-override", "3")}, "kvdoctor sizes both pools"),
        ({"extra_args": ("--served-model-name", "x")}, "not allowed"),
    ],
)
def test_what_vllm_cannot_take_is_refused_before_anything_starts(kwargs: dict[str, object], words: str) -> None:
    with pytest.raises(InputError, match=words.replace("-", r"\-")):
        run.prepare(run.ConsistencyOptions("llama-3.1-8b", shrink=True, server="vllm", **kwargs))  # type: ignore[arg-type]


def test_the_cli_refusal_is_one_line_and_exit_2() -> None:
    got = CliRunner().invoke(
        app, ["consistency", "llama-3.1-8b", "--shrink", "--server", "vllm", "--topology", "pd", "--dry-run"]
    )
    assert got.exit_code == EXIT_INPUT
    lines = [line for line in got.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("kvdoctor: error: --server vllm runs --topology single")


def test_the_dry_run_shows_both_vllm_servers_and_nothing_starts(tmp_path: Path) -> None:
    out = str(tmp_path)
    args = ["consistency", "llama-3.1-8b", "--shrink", "--server", "vllm", "--dry-run", "--json", "--output-dir", out]
    got = CliRunner().invoke(app, args)
    assert got.exit_code == 0, got.output
    steps = json.loads(got.output)["deployment"]["steps"]
    assert [s["role"] for s in steps] == ["reference", "pressured"]
    assert all("vllm.entrypoints.openai.api_server" in " ".join(s["argv"]) for s in steps)
    assert not list(tmp_path.iterdir()), "a dry run writes nothing"


# ---- the probe ---------------------------------------------------------------------------------------------

PAGE = """# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="kvdoctor"} 7.0
vllm:num_preemptions_total{engine="1",model_name="kvdoctor"} 2.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="kvdoctor"} 0.0
"""


def test_preemptions_are_summed_over_engines_and_absent_is_unknown_not_zero() -> None:
    assert probe_vllm.from_prometheus(PAGE) == 9
    assert probe_vllm.from_prometheus(PAGE.split("# HELP vllm:num_requests_running")[0].replace("7.0", "0.0")) == 2
    assert probe_vllm.from_prometheus("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n") is None


def test_a_malformed_or_backwards_counter_is_the_deployments_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(MalformedMetric):
        probe_vllm.from_prometheus(PAGE.replace("7.0", "NaN"))
    counts = iter([5, 3])
    monkeypatch.setattr(probe_vllm, "scrape", lambda _url, _t=10.0: next(counts))
    p = probe_vllm.PreemptionProbe("http://x")
    p.start()
    with pytest.raises(CounterWentBackwards):
        p.finish()
    counts = iter([5, None])
    p.start()
    assert p.finish().source == "none"


# ---- the client --------------------------------------------------------------------------------------------


def test_the_completion_request_is_greedy_token_ids_with_top_2() -> None:
    body = completion_body([5, 6, 7], Workload(max_new_tokens=9), "kvdoctor")
    assert body == {
        "model": "kvdoctor",
        "prompt": [5, 6, 7],
        "max_tokens": 9,
        "temperature": 0.0,
        "logprobs": 2,
        "return_tokens_as_token_ids": True,
    }


def test_a_completion_reply_becomes_tokens_logprobs_and_margins() -> None:
    reply = {
        "choices": [
            {
                "finish_reason": "length",
                "logprobs": {
                    "tokens": ["token_id:11", "token_id:12"],
                    "token_logprobs": [-0.5, -1.0],
                    "top_logprobs": [{"token_id:11": -0.5, "token_id:3": -2.0}, {"token_id:12": -1.0}],
                },
            }
        ]
    }
    g = parse_completion(reply)
    assert g.tokens == (11, 12) and g.logprobs == (-0.5, -1.0) and g.margins == (1.5, None)
    assert g.finish == "length"
    reply["choices"][0]["logprobs"]["tokens"] = ["hello", "token_id:12"]  # type: ignore[index]
    with pytest.raises(Exception, match="token_id"):
        parse_completion(reply)


# ---- the plugin --------------------------------------------------------------------------------------------


def test_the_plugin_is_inert_without_a_fault(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(server_plugin.INJECT_ENV, raising=False)
    monkeypatch.setenv(server_plugin.LOG_ENV, str(tmp_path / "log"))
    before = list(sys.meta_path)
    server_plugin.register()
    assert sys.meta_path == before
    assert (tmp_path / "log").read_text().split()[1:] == ["loaded", "-"]


def _fake_runner_module(num_blocks: int) -> types.ModuleType:
    group = types.SimpleNamespace(kv_cache_spec="attention", layer_names=["layer.0"])
    kv = torch.ones(num_blocks, 2, 4)

    class GPUModelRunner:
        def __init__(self) -> None:
            self.kv_cache_config = types.SimpleNamespace(num_blocks=num_blocks, kv_cache_groups=[group])
            self.compilation_config = types.SimpleNamespace(
                static_forward_context={"layer.0": types.SimpleNamespace(kv_cache=kv)}
            )
            self.requests = {
                "r1": types.SimpleNamespace(block_ids=([1, 3],)),
                "r2": types.SimpleNamespace(block_ids=([2],)),
            }

        def _update_states(self, scheduler_output: object) -> str:
            return "updated"

    module = types.ModuleType("fake_runner")
    module.GPUModelRunner = GPUModelRunner  # type: ignore[attr-defined]
    module.kv = kv  # type: ignore[attr-defined]
    return module


def _step(resumed: set[str]) -> object:
    return types.SimpleNamespace(scheduled_cached_reqs=types.SimpleNamespace(resumed_req_ids=resumed))


def test_drop_kv_zeroes_a_resumed_requests_blocks_one_step_later_and_logs_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    log = tmp_path / "plugin.log"
    monkeypatch.setenv(server_plugin.LOG_ENV, str(log))
    monkeypatch.setattr(server_plugin, "_wanted", lambda spec, fault: spec == "attention")
    module = _fake_runner_module(num_blocks=5)
    server_plugin._patch(module, "drop-kv")
    runner = module.GPUModelRunner()
    assert runner._update_states(_step({"r1"})) == "updated"
    assert bool(module.kv.eq(1).all()), "nothing is zeroed in the resume step itself (its KV is recomputed)"
    runner._update_states(_step(set()))
    assert module.kv[[1, 3]].abs().sum() == 0, "the resumed request's blocks are zeroed"
    assert bool(module.kv[[0, 2, 4]].eq(1).all()), "no other request's block is touched"
    events = [line.split(" ", 2)[1:] for line in log.read_text().splitlines()]
    assert events[0][0] == "fault-installed"
    assert events[1] == ["fault-fired", "drop-kv r1 blocks=2 layers=1"]


def test_a_fault_that_never_fired_or_failed_turns_the_run_red(tmp_path: Path) -> None:
    def settled(lines: list[str]) -> ConsistencyResult:
        (tmp_path / deploy_vllm.PLUGIN_LOG).write_text("".join(f"1 {line}\n" for line in lines))
        r = ConsistencyResult(
            "m",
            "dense",
            "single",
            "cpu",
            True,
            {},
            server="vllm",
            fault=FaultReport("drop-kv", "pressured"),
            gates=[gates.Gate("tokens", True, "passed", "32/32 identical")],
            exit_code=0,
        )
        return vllm_room.read_plugin_log(tmp_path, r)

    quiet = settled(["loaded drop-kv", "fault-installed drop-kv x"])
    assert quiet.exit_code == EXIT_GATE and quiet.exit_reason == "no_teeth"
    failed = settled(["fault-installed drop-kv x", "fault-failed r1 RuntimeError: boom"])
    assert failed.exit_code == EXIT_GATE and failed.exit_reason == "fault_failed"
    fired = settled(["fault-installed drop-kv x", "fault-fired drop-kv r1 blocks=2"])
    assert fired.exit_code == 0 and fired.fault is not None and fired.fault.restores == 1


def test_the_pressure_gate_speaks_of_preemptions_for_vllm_and_is_unchanged_for_sglang() -> None:
    assert "preempted nothing" in gates.pressure(0, 0, "metrics", **gates.VLLM_PRESSURE).message
    assert gates.pressure(0, 0, "metrics").message == (
        "guard has no teeth: the pressured run retracted nothing, so no state was ever backed up and restored"
    )


def test_the_verdict_line_counts_preemptions_for_vllm_and_retractions_for_sglang() -> None:
    def line(server: str) -> str:
        r = ConsistencyResult(
            "m",
            "dense",
            "single",
            "cpu",
            True,
            {},
            server=server,
            exit_code=0,
            identical=32,
            total=32,
            retractions={"pressured": 24, "reference": 0},
        )
        return r.summary_line()

    assert line("vllm").startswith("32/32 requests identical, 24 preemptions")
    assert line("sglang").startswith("32/32 requests identical, 24 retractions")


def test_a_mamba_layers_conv_and_ssm_tensors_are_both_zeroed_at_the_blocks_only() -> None:
    conv, ssm = torch.ones(4, 3, 2), torch.ones(4, 5)
    assert server_plugin._zero((conv, ssm), [2], num_blocks=4) == 2
    assert conv[2].abs().sum() == 0 and ssm[2].abs().sum() == 0
    assert bool(conv[[0, 1, 3]].eq(1).all()) and bool(ssm[[0, 1, 3]].eq(1).all())
    assert server_plugin._zero(torch.ones(3, 3), [1], num_blocks=7) == 0, "a tensor not indexed by block is left"
