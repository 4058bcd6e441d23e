"""``--prefill-url/--decode-url/--router-url``: servers someone else runs; kvdoctor starts none."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
import pytest

from tests.pd.helpers import Deploy, invoke, pd_args, result_json

pytestmark = pytest.mark.usefixtures("no_leftovers")


def test_external_deployment_is_evaluated_not_started(tmp_path: Path, deploy: Deploy) -> None:
    urls = deploy("--enable-metrics")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    run = invoke([*pd_args(tmp_path, "--json"), "--router-url", urls["router"], "--decode-url", urls["decode"]])
    assert run.exit_code == 0, run.output
    data = json.loads(run.stdout)
    assert data["launch_plan"]["external"] is True and data["logs"] == {}
    assert data["retraction_source"] == "metrics" and data["retractions"] > 0
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before
    assert httpx.get(urls["decode"] + "/health").status_code == 200  # left running: not ours


def test_external_decode_without_metrics_cannot_prove_retraction(tmp_path: Path, deploy: Deploy) -> None:
    urls = deploy()
    run = invoke([*pd_args(tmp_path), "--router-url", urls["router"], "--decode-url", urls["decode"]])
    assert run.exit_code == 1
    data = result_json(tmp_path)
    assert data["exit_reason"] == "retraction_unknown" and data["retractions"] is None


def wait_healthy(*urls: str) -> None:
    """Poll until each URL answers 200 (synchronising on state, with a generous deadline)."""
    deadline = time.monotonic() + 60
    for url in urls:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=5).status_code == 200:
                    break
            assert time.monotonic() < deadline, f"{url} never became healthy"
            time.sleep(0.05)


@pytest.mark.parametrize(("hang_after", "where"), [(1, "the eval"), (0, "the first request")])
def test_timeout(tmp_path: Path, deploy: Deploy, knobs: Callable[..., None], hang_after: int, where: str) -> None:
    # Against a deployment that is already up, --timeout covers only the requests, so the
    # outcome cannot flip to "unhealthy" on a loaded machine. hang_after=1: the smoke request
    # passes and the eval hangs; 0: the smoke request hangs.
    knobs(DECODE_HANG_SECONDS="120", DECODE_HANG_AFTER=str(hang_after))
    urls = deploy("--enable-metrics")
    wait_healthy(urls["decode"] + "/health", urls["router"] + "/health")
    run = invoke([*pd_args(tmp_path, "--timeout", "3"), "--router-url", urls["router"], "--decode-url", urls["decode"]])
    data = result_json(tmp_path)
    assert run.exit_code == 3, run.output
    assert data["exit_reason"] == "timeout"
    assert data["message"].startswith(where) and "--timeout 3 s" in data["message"]


def test_fresh_decode_without_retraction_counts_zero_not_unknown(
    tmp_path: Path, deploy: Deploy, knobs: Callable[..., None]
) -> None:
    # SGLang's /metrics carries only HELP/TYPE for the counter until the first retraction.
    knobs(DECODE_RETRACT_EVERY="0")
    urls = deploy("--enable-metrics")
    run = invoke([*pd_args(tmp_path), "--router-url", urls["router"], "--decode-url", urls["decode"]])
    data = result_json(tmp_path)
    assert run.exit_code == 1
    assert data["exit_reason"] == "no_retraction"
    assert data["retractions"] == 0 and data["retraction_source"] == "metrics"


def test_timeout_bounds_the_server_info_probes(tmp_path: Path, deploy: Deploy, knobs: Callable[..., None]) -> None:
    """``--timeout`` bounds the whole run: a decode whose /server_info hangs once made a 4 s budget
    take 20 s and more (two 10 s probes outside the deadline). Now the probes stop at the deadline."""
    knobs(DECODE_INFO_HANG_SECONDS="120")
    urls = deploy("--enable-metrics")
    wait_healthy(urls["decode"] + "/health", urls["router"] + "/health")
    started = time.monotonic()
    run = invoke([*pd_args(tmp_path, "--timeout", "4"), "--router-url", urls["router"], "--decode-url", urls["decode"]])
    elapsed = time.monotonic() - started
    data = result_json(tmp_path)
    assert run.exit_code == 3, run.output
    assert data["exit_reason"] == "timeout"
    assert data["message"] == "the /server_info probes did not finish within --timeout 4 s"
    assert elapsed < 4 + 6, f"took {elapsed:.1f} s"
    assert httpx.get(urls["router"] + "/health").status_code == 200  # external servers left alone
