"""``kvdoctor consistency --server vllm --scenario offload`` without a server: the plan (the OffloadingConnector on
the pressured server only, its CPU tier sized for every in-flight request), the refusals (a CPU, with vLLM's own
message; flags the scenario owns; faults of other scenarios), the offload probe and gate on a ``/metrics`` page, the
``drop-offload`` fault's plugin wiring and the JSON.

No server exports the offload counters here (vLLM refuses the OffloadingConnector on a CPU), so the pages
``vllm_metrics_offload_{before,after}.txt`` are not recorded from a server: they are written by prometheus_client
(the library vLLM exports with) with the metric names and labels vLLM's code gives (vLLM 0.32
distributed/kv_transfer/kv_connector/v1/offloading/metrics.py, ``_TransferMetricName``; v1/metrics/loggers.py), so
the parsing is of real Prometheus text, the numbers are made up. The fault against vLLM's real worker is
tests/engines/vllm/test_vllm_offload_fault.py; a GPU run is not measured.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvdoctor._exceptions import EXIT_GATE, EXIT_INPUT, EXIT_PASS, InputError
from kvdoctor.cli.app import app
from kvdoctor.consistency import gates, probe_vllm, report, run
from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.fault_gate import words
from kvdoctor.consistency.probe_vllm import OffloadCount
from kvdoctor.consistency.result import ConsistencyResult, FaultReport
from kvdoctor.consistency.scenarios.offload import OffloadResult
from kvdoctor.consistency.servers.vllm import deployment as vllm_room
from kvdoctor.consistency.servers.vllm import offload as vllm_offload
from kvdoctor.consistency.servers.vllm import plan as deploy_vllm
from kvdoctor.consistency.workload import Workload
from kvdoctor.engines.vllm import server_plugin
from tests.schema_check import assert_valid

HERE = Path(__file__).parent
BEFORE = (HERE / "vllm_metrics_offload_before.txt").read_text(encoding="utf-8")
AFTER = (HERE / "vllm_metrics_offload_after.txt").read_text(encoding="utf-8")
PREFIX_PAGE = (HERE / "vllm_metrics_prefix_cache.txt").read_text(encoding="utf-8")  # a real server, no connector


def _prepared(model: str = "llama-3.1-8b", device: str = "cuda", **kw: object) -> run.Prepared:
    return run.prepare(
        run.ConsistencyOptions(model, shrink=True, server="vllm", device=device, scenario="offload", **kw)  # type: ignore[arg-type]
    )


def _flag(argv: tuple[str, ...], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# ---- the plan ----------------------------------------------------------------------------------------------


def test_only_the_pressured_server_offloads_and_the_pools_are_preempts() -> None:
    prepared = _prepared()
    ref, press = run.plan_for(prepared, "/ckpt", None).steps
    assert "--kv-offloading-size" not in ref.argv and "--kv-offloading-backend" not in ref.argv
    assert _flag(press.argv, "--kv-offloading-backend") == "native"
    preempt = run.prepare(run.ConsistencyOptions("llama-3.1-8b", shrink=True, server="vllm", device="cuda"))
    pref, ppress = run.plan_for(preempt, "/ckpt", None).steps
    # Both servers: preempt's plus --no-enable-prefix-caching (the GPU prefix cache, asked before the connector,
    # would hold a preempted request's prompt blocks and no load from the CPU tier would happen).
    nocache = list(ref.argv)
    nocache.remove("--no-enable-prefix-caching")
    assert tuple(nocache) == pref.argv, "the reference is preempt's roomy reference without the GPU prefix cache"
    without = list(press.argv)
    without.remove("--no-enable-prefix-caching")
    i = without.index("--kv-offloading-size")
    assert without[i : i + 6] == [
        "--kv-offloading-size",
        _flag(press.argv, "--kv-offloading-size"),
        "--kv-offloading-backend",
        "native",
        "--kv-transfer-config",
        '{"kv_connector_extra_config": {"offload_prompt_only": false}}',
    ], "decode KV reaches the CPU tier too (offload_prompt_only defaults to True)"
    del without[i : i + 6]
    assert tuple(without) == ppress.argv, "the subject is preempt's pressured server plus the connector"
    assert press.env["VLLM_USE_SIMPLE_KV_OFFLOAD"] == "0" and "VLLM_USE_SIMPLE_KV_OFFLOAD" not in ref.env
    assert int(_flag(press.argv, "--num-gpu-blocks-override")) < int(_flag(ref.argv, "--num-gpu-blocks-override"))


def test_the_cpu_tier_holds_every_in_flight_requests_blocks() -> None:
    """Every preempted request's blocks fit: the tier holds all in-flight requests' blocks (twice), whatever the
    concurrency; the size is what --kv-offloading-size says (vLLM: GiB x 2^30 bytes)."""
    for concurrency in (4, 32, 256):
        prepared = _prepared(workload=Workload(requests=256, concurrency=concurrency))
        o = vllm_room.options(prepared, "/ckpt", None)
        per_request, tier = vllm_offload.offload_bytes(o)
        assert per_request > 0
        assert tier >= o.workload.in_flight * per_request * vllm_offload.OFFLOAD_HEADROOM
        press = run.plan_for(prepared, "/ckpt", None).steps[1]
        assert float(_flag(press.argv, "--kv-offloading-size")) * (1 << 30) == tier
    small = vllm_offload.offload_bytes(vllm_room.options(_prepared(workload=Workload(concurrency=4)), "/c", None))
    big = vllm_offload.offload_bytes(vllm_room.options(_prepared(workload=Workload(concurrency=32)), "/c", None))
    assert small[0] == big[0]


def test_one_requests_bytes_are_every_layers_pages_of_its_blocks() -> None:
    """The shrunk Llama on a GPU: 16-token blocks, float16/bfloat16 K and V per layer (the sizing model's page)."""
    prepared = _prepared()
    o = vllm_room.options(prepared, "/ckpt", None)
    a = deploy_vllm.analysis(o, deploy_vllm._server_flags(o))
    assert a.groups is not None
    want = sum(
        deploy_vllm.request_blocks(g, o.workload.per_request_tokens) * g.spec.page_size_bytes * len(g.layer_names)
        for g in a.groups
    )
    assert vllm_offload.offload_bytes(o)[0] == want
    assert all(g.spec.block_size == 16 for g in a.groups)


def test_the_dry_run_on_cuda_prints_both_launch_lines_and_starts_nothing(tmp_path: Path) -> None:
    args = ["consistency", "llama-3.1-8b", "--shrink", "--server", "vllm", "--device", "cuda", "--scenario", "offload"]
    got = CliRunner().invoke(app, [*args, "--dry-run", "--output-dir", str(tmp_path)])
    assert got.exit_code == 0, got.output
    lines = [line for line in got.output.splitlines() if "vllm.entrypoints.openai.api_server" in line]
    assert len(lines) == 2
    assert (
        "--kv-offloading-size" not in lines[0]
        and "--kv-offloading-size 0.01 --kv-offloading-backend native" in lines[1]
    )
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_cpu_is_refused_before_launch_with_vllms_message_as_a_finding(tmp_path: Path, dry_run: bool) -> None:
    """--device cpu: one line, exit 2, naming vLLM's own refusal and where it is, as a finding about vLLM; the dry
    run the same (it prints what would start, and on a CPU nothing would: vLLM refuses the connector)."""
    args = ["consistency", "llama-3.1-8b", "--shrink", "--server", "vllm", "--device", "cpu", "--scenario", "offload"]
    got = CliRunner().invoke(app, [*args, *(["--dry-run"] if dry_run else []), "--output-dir", str(tmp_path)])
    assert got.exit_code == EXIT_INPUT, got.output
    lines = [line for line in got.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("kvdoctor: error: --scenario offload cannot run on a CPU"), lines
    assert f'"{vllm_offload.OFFLOAD_CPU_MESSAGE}"' in lines[0]
    assert "v1/kv_offload/cpu/spec.py:196-207" in lines[0] and "a finding about vLLM on CPU" in lines[0]
    assert not list(tmp_path.iterdir()), "nothing was started or written"


def test_the_cpu_finding_quotes_the_installed_vllms_message() -> None:
    """The message kvdoctor quotes is in the installed vLLM 0.32 server's spec.py at the lines it names."""
    site = sorted((Path(__file__).parents[2] / ".venv-vllm-server" / "lib").glob("python3.*/site-packages/vllm"))
    if not site:
        pytest.skip("no .venv-vllm-server here (make vllm-server-env)")
    lines = (site[0] / "v1/kv_offload/cpu/spec.py").read_text(encoding="utf-8").splitlines()[195:207]
    text = "".join(line.strip().strip('"') for line in lines)
    assert "def get_worker" in text and vllm_offload.OFFLOAD_CPU_MESSAGE in text


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--server", "sglang"], "--scenario offload runs on --server vllm only"),
        (["--inject", "drop-kv"], "needs --scenario preempt"),
        (["--inject", "drop-prefix"], "needs --scenario prefix-cache"),
        (["--", "--kv-offloading-size", "4"], "--kv-offloading-size after -- is not allowed with --scenario offload"),
        (["--", "--kv-offloading-backend", "lmcache"], "--kv-offloading-backend after -- is not allowed"),
        (["--", "--kv-transfer-config", "{}"], "--kv-transfer-config after -- is not allowed"),
    ],
)
def test_what_the_scenario_cannot_take_is_one_line_and_exit_2(args: list[str], words: str) -> None:
    base = ["consistency", "llama-3.1-8b", "--shrink", "--device", "cuda", "--scenario", "offload", "--dry-run"]
    server = [] if "--server" in args else ["--server", "vllm"]
    got = CliRunner().invoke(app, [*base, *server, *args])
    assert got.exit_code == EXIT_INPUT, got.output
    lines = [line for line in got.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("kvdoctor: error:") and words in lines[0], lines


def test_drop_offload_needs_the_offload_scenario_and_goes_to_the_pressured_server_only() -> None:
    with pytest.raises(InputError, match="needs --scenario offload"):
        deploy_vllm.check_fault("drop-offload", has_recurrent=False, scenario="preempt")
    prepared = _prepared(inject="drop-offload")
    ref, press = run.plan_for(prepared, "/ckpt", None).steps
    assert press.env[server_plugin.INJECT_ENV] == "drop-offload" and server_plugin.INJECT_ENV not in ref.env


def test_the_default_preempt_plan_is_unchanged_by_the_offload_scenario() -> None:
    """Preempt's launch lines carry no offloading flag (its golden case, consistency-vllm-dry-run, is unchanged)."""
    for device in ("cpu", "cuda"):
        plain = run.prepare(run.ConsistencyOptions("llama-3.1-8b", shrink=True, server="vllm", device=device))
        for step in run.plan_for(plain, "/ckpt", None).steps:
            assert not {"--kv-offloading-size", "--kv-offloading-backend"} & set(step.argv)


# ---- the probe and the gate --------------------------------------------------------------------------------


def test_the_page_gives_vllms_offload_counters_and_a_page_without_a_connector_none() -> None:
    assert probe_vllm.offload_from_prometheus(AFTER) == (2359296, 6291456, 1152, 2304)
    assert probe_vllm.from_prometheus(AFTER) == 37
    assert probe_vllm.offload_from_prometheus(PREFIX_PAGE)[:2] == (None, None), "a server without the connector"


def _probe(monkeypatch: pytest.MonkeyPatch, *pages: str) -> OffloadCount:
    it = iter(pages)
    monkeypatch.setattr(
        probe_vllm, "scrape_offload", lambda _url, _t=10.0: probe_vllm.offload_from_prometheus(next(it))
    )
    p = probe_vllm.OffloadProbe("http://x")
    p.start()
    return p.finish()


def test_the_probe_reports_the_bursts_delta(monkeypatch: pytest.MonkeyPatch) -> None:
    moved = _probe(monkeypatch, BEFORE, AFTER)
    assert (moved.load_bytes, moved.store_bytes, moved.external_hits, moved.source) == (
        2359296,
        4718592,
        1152,
        "metrics",
    )
    same = _probe(monkeypatch, AFTER, AFTER)
    assert same.load_bytes == 0 and same.source == "metrics"
    none = _probe(monkeypatch, PREFIX_PAGE, PREFIX_PAGE)
    assert none.load_bytes is None and none.source == "none"


def _gens(n: int = 8) -> list[Generation]:
    return [Generation(tuple(range(i, i + 16)), tuple([-1.0] * 16), tuple([0.5] * 16)) for i in range(n)]


def _evaluated(
    reference: OffloadCount, subject: OffloadCount, preemptions: int = 37, got: list[Generation] | None = None
) -> OffloadResult:
    r = OffloadResult(
        "m",
        "dense",
        "single",
        "cuda",
        True,
        Workload().to_dict(),
        server="vllm",
        retractions={"reference": 0, "pressured": preemptions},
        retraction_source="metrics",
        offload={"load_bytes": {"reference": reference.load_bytes, "pressured": subject.load_bytes}},
    )
    ref = _gens()
    r = run.evaluate(r, ref, ref, got or ref, stand_in_used=False, server="vllm", offload_loads=(reference, subject))
    return r


def test_loads_from_the_cpu_tier_and_preemptions_are_both_required(monkeypatch: pytest.MonkeyPatch) -> None:
    ref = _probe(monkeypatch, PREFIX_PAGE, PREFIX_PAGE)  # the reference has no connector: none on its page
    loaded = _probe(monkeypatch, BEFORE, AFTER)
    ok = _evaluated(ref, loaded)
    assert ok.exit_code == EXIT_PASS, ok.message
    assert [g.name for g in ok.gates][:4] == ["tokens", "logprobs", "pressure", "offload"]
    assert ok.summary_line().startswith(
        "8/8 requests identical, 37 preemptions, 2,359,296 bytes loaded from the CPU tier"
    )
    cold = _evaluated(ref, _probe(monkeypatch, AFTER, AFTER))
    gate = next(g for g in cold.gates if g.name == "offload")
    assert cold.exit_code == EXIT_GATE and gate.reason == "no_teeth" and "loaded 0 bytes" in gate.message
    unknown = _evaluated(ref, ref)
    assert unknown.exit_code == EXIT_GATE and "unknown" in next(g for g in unknown.gates if g.name == "offload").message
    no_preempt = _evaluated(ref, loaded, preemptions=0)
    assert no_preempt.exit_code == EXIT_GATE and no_preempt.exit_reason == "no_teeth"
    assert next(g for g in no_preempt.gates if g.name == "pressure").passed is False
    loading_ref = _evaluated(loaded, loaded)
    assert loading_ref.exit_code == EXIT_GATE and "it is no reference" in loading_ref.message


def test_a_resumed_request_that_read_stale_blocks_is_red(monkeypatch: pytest.MonkeyPatch) -> None:
    ref = _probe(monkeypatch, PREFIX_PAGE, PREFIX_PAGE)
    stale = _gens()
    stale[3] = dataclasses.replace(stale[3], tokens=stale[3].tokens[:5] + (999,) * 11)
    r = _evaluated(ref, _probe(monkeypatch, BEFORE, AFTER), got=stale)
    assert (
        r.exit_code == EXIT_GATE
        and r.exit_reason == "diverged"
        and next(g for g in r.gates if g.name == "offload").passed
    )


def test_drop_offload_that_never_fired_or_copied_nothing_is_red(tmp_path: Path) -> None:
    said = words("drop-offload", "vllm")
    assert said is not None
    g = gates.fault_fired("drop-offload", True, 0, None, said)
    assert not g.passed and "the offloading worker loaded nothing" in g.message
    assert "2 load(s) from the CPU tier" in gates.fault_fired("drop-offload", True, 2, None, said).message
    (tmp_path / deploy_vllm.PLUGIN_LOG).write_text(
        "7 loaded drop-offload\n7 fault-installed drop-offload vllm.v1.kv_offload.cpu.gpu_worker.CPUOffloadingWorker"
        ".submit_load\n7 fault-failed job=3 drop-offload suppressed no copy (the load issued none)\n",
        encoding="utf-8",
    )
    r = OffloadResult(
        "m",
        "dense",
        "single",
        "cuda",
        True,
        {},
        server="vllm",
        fault=FaultReport("drop-offload", "pressured"),
        gates=[gates.Gate("tokens", True, "passed", "32/32 identical")],
        exit_code=EXIT_PASS,
    )
    r = vllm_room.read_plugin_log(tmp_path, r)
    assert r.exit_code == EXIT_GATE and r.exit_reason == "fault_failed" and "suppressed no copy" in r.message


def test_drop_offload_installs_on_the_offloading_workers_module() -> None:
    """register() waits for vLLM's gpu_worker module (not the model runner) for drop-offload."""
    assert set(server_plugin.fault_hooks("drop-offload")) == {server_plugin.OFFLOAD_TARGET}
    assert server_plugin.OFFLOAD_TARGET == "vllm.v1.kv_offload.cpu.gpu_worker"
    assert server_plugin.OFFLOAD_WORKERS == ("CPUOffloadingWorker",)


# ---- the JSON ----------------------------------------------------------------------------------------------


def _document(r: ConsistencyResult) -> dict[str, object]:
    return json.loads(json.dumps(report.json_document(r), default=str))


def test_the_offload_json_is_declared_and_a_preempt_document_has_none_of_its_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prepared = _prepared()
    ref = _probe(monkeypatch, PREFIX_PAGE, PREFIX_PAGE)
    loaded = _probe(monkeypatch, BEFORE, AFTER)
    r = OffloadResult("m", "dense", "single", "cuda", True, Workload().to_dict(), server="vllm")
    r = vllm_offload.record(r, vllm_room.options(prepared, "<model>", None), ref, loaded)
    r = run.evaluate(r, _gens(), _gens(), _gens(), stand_in_used=False, server="vllm", offload_loads=(ref, loaded))
    doc = assert_valid(_document(r), "consistency")
    assert doc["scenario"] == "offload" and doc["offload"]["load_bytes"] == {"reference": None, "pressured": 2359296}
    assert doc["offload"]["kv_offloading_size_gib"] == 0.01 and doc["offload"]["source"] == "none/metrics"
    plain = ConsistencyResult("m", "dense", "single", "cpu", True, Workload().to_dict(), server="vllm")
    assert not {"scenario", "offload"} & set(_document(plain))


def test_the_terminal_names_the_offload_evidence_and_the_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from kvdoctor.cli.consistency import print_result

    ref, loaded = _probe(monkeypatch, PREFIX_PAGE, PREFIX_PAGE), _probe(monkeypatch, BEFORE, AFTER)
    r = OffloadResult(
        "m",
        "dense",
        "single",
        "cuda",
        True,
        Workload().to_dict(),
        server="vllm",
        fault=FaultReport("drop-offload", "pressured", installed=True, restores=3),
    )
    r = vllm_offload.record(r, vllm_room.options(_prepared(), "<model>", None), ref, loaded)
    r = run.evaluate(r, _gens(), _gens(), _gens(), stand_in_used=False, server="vllm", offload_loads=(ref, loaded))
    console = Console(record=True, width=200)
    print_result(console, r)
    text = console.export_text()
    assert "offload (bytes, CPU tier 0.01 GiB): loaded reference None, pressured 2359296" in text
    assert "fault drop-offload in pressured: installed True, fired on 3 load(s) from the CPU tier" in text
    assert "gate offload: pass: pressured server loaded 2,359,296 bytes from its CPU tier" in text


def test_a_page_that_declares_the_offload_counters_without_a_sample_reads_0() -> None:
    """vLLM makes each offload counter's per-engine series at its first load or store (offloading/metrics.py:404-424):
    before any, /metrics has the HELP/TYPE lines only. That is 0, not unknown; a page without the family stays None."""
    declared = "".join(
        f"# HELP {n.removesuffix('_total')} bytes\n# TYPE {n.removesuffix('_total')} counter\n"
        for n in probe_vllm.OFFLOAD_COUNTERS
    )
    assert probe_vllm.offload_from_prometheus(declared) == (0,) * len(probe_vllm.OFFLOAD_COUNTERS)
    assert probe_vllm.offload_from_prometheus("") == (None,) * len(probe_vllm.OFFLOAD_COUNTERS)
