"""Retraction counts from Prometheus text and from decode logs, one per decision."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdoctor.deploy import metrics

PAGE = """\
# HELP sglang:num_retracted_requests_total Total number of retracted requests.
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{engine_type="decode",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 7.0
sglang:num_retracted_requests_created{engine_type="decode",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 1.7e9
sglang:num_retracted_requests_total{engine_type="decode",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 7.0
# HELP sglang:num_retracted_reqs The number of retracted requests.
# TYPE sglang:num_retracted_reqs gauge
sglang:num_retracted_reqs{engine_type="decode",tp_rank="0"} 3.0
"""


def test_counter_is_read_once_across_tp_ranks() -> None:
    assert metrics.from_prometheus(PAGE) == 7


def test_data_parallel_groups_add_up() -> None:
    page = PAGE.replace('tp_rank="1"', 'tp_rank="1",dp_rank="1"').replace(
        'pp_rank="0",tp_rank="0"}', 'pp_rank="0",tp_rank="0",dp_rank="0"}'
    )
    assert metrics.from_prometheus(page) == 14


def test_page_without_the_counter_is_unknown() -> None:
    assert metrics.from_prometheus("# TYPE x counter\nx_total 1.0\n") is None
    assert metrics.from_prometheus("") is None


def test_fresh_sglang_page_means_zero_retractions() -> None:
    # SGLang creates the sample only at the first retraction: until then HELP/TYPE only.
    declared = "\n".join(PAGE.splitlines()[:2]) + "\n"
    assert metrics.from_prometheus(declared) == 0
    others = '# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{tp_rank="0"} 2.0\n'
    assert metrics.from_prometheus(others) == 0


FULL = "KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_tokens_gained: 10, "
LOG = f"""\
[2026-11-29 10:00:00 TP0] {FULL}#new_token_ratio: 0.6912 -> 0.8140
[2026-11-29 10:00:00 TP1] {FULL}#new_token_ratio: 0.6912 -> 0.8140
[2026-11-29 10:00:01 TP0] Decode batch, #running-req: 3, #retracted-req: 1, pre-allocated usage: 0.10
[2026-11-29 10:00:02 TP0] Testing retraction. #retracted_reqs: 1, #new_tokens_gained: 5
[2026-11-29 10:00:02 TP1] Testing retraction. #retracted_reqs: 1, #new_tokens_gained: 5
"""


def test_log_counts_each_retraction_once_across_tp_ranks() -> None:
    assert metrics.from_log(LOG) == 3


def test_log_without_tp_prefix_and_with_dp_groups() -> None:
    plain = "[2026-11-29 10:00:00] KV cache pool is full. Retract requests. #retracted_reqs: 4, x\n"
    assert metrics.from_log(plain * 2) == 8
    dp = LOG.replace(" TP1]", " DP1 TP1]").replace(" TP0]", " DP0 TP0]")
    assert metrics.from_log(dp) == 6


def test_probe_uses_log_growth_when_metrics_are_off(tmp_path: Path) -> None:
    log = tmp_path / "decode.log"
    log.write_text(LOG)
    probe = metrics.RetractionProbe(None, log)
    probe.start()
    with log.open("a") as fh:
        fh.write("[t] KV cache pool is full. Retract requests. #retracted_reqs: 5, x\n")
    assert probe.finish() == metrics.RetractionCount(5, "log")


def test_probe_without_any_source_is_unknown() -> None:
    probe = metrics.RetractionProbe("http://127.0.0.1:9", None)
    probe.start()
    assert probe.finish() == metrics.RetractionCount(None, "none")


@pytest.mark.parametrize(("value", "shown"), [("+Inf", "+Inf"), ("NaN", "NaN"), ("-3.0", "-3.0")])
def test_a_counter_that_is_no_count_is_named_not_counted(value: str, shown: str) -> None:
    """``int(inf)`` once raised OverflowError (a kvdoctor bug, exit 3 internal_error), and NaN compared as
    0 ("no retraction: the pool was too large"): both are the server's malformed metric."""
    page = PAGE.replace('tp_rank="1"} 7.0', f'tp_rank="1"}} {value}')
    with pytest.raises(metrics.MalformedMetric) as caught:
        metrics.from_prometheus(page)
    assert caught.value.exit_code == 3 and caught.value.reason == "malformed_metric"
    assert 'sglang:num_retracted_requests_total{engine_type="decode",' in str(caught.value)
    assert f'tp_rank="1"}} is {shown}, not a count' in str(caught.value)


def test_a_counter_that_went_backwards_is_a_reset_not_zero_retractions(monkeypatch: pytest.MonkeyPatch) -> None:
    scrapes = iter([9, 3])
    monkeypatch.setattr(metrics, "scrape", lambda *_: next(scrapes))
    probe = metrics.RetractionProbe("http://decode", None)
    probe.start()
    with pytest.raises(metrics.CounterWentBackwards, match=r"went backwards during the eval \(9 before it, 3 after\)"):
        probe.finish()
