"""Every count of a consistency run is bounded before any work (issue 28, defects 4, 6 and 7's --seed): the seed by
what torch.manual_seed takes, each request by the server's context, the workload by what this machine holds (memory,
open files). Each refusal is exit 2 and one line, naming the limit; nothing is generated, written or started.
The same bounds hold for ``pd-eval --oracle tokens`` and ``bench consistency`` (one ``prepare``)."""

from __future__ import annotations

import random
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kvdoctor._exceptions import InputError
from kvdoctor.consistency import context_limit, run
from kvdoctor.consistency.shrink import MAX_POSITIONS, shrink
from kvdoctor.consistency.workload import SEED_MAX, Workload
from kvdoctor.core.config import load_config

FAST_S = 60  # a refusal is arithmetic: generating 10^8 prompts first took far longer (and tens of GB)


def kvdoctor(*args: str, limit_files: int | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    def lower() -> None:
        if limit_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit_files, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    return subprocess.run(
        [sys.executable, "-m", "kvdoctor", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=lower,
    )


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("kvdoctor: error: "), done.stderr
    return lines[0]


# --- defect 7: the seed ---


def test_the_largest_seed_is_one_torch_and_random_take_and_one_more_is_refused() -> None:
    Workload(seed=SEED_MAX).check()
    torch.manual_seed(SEED_MAX)  # the checkpoint's seed: accepted
    random.Random(SEED_MAX)  # the prompts' seed
    for bad in (SEED_MAX + 1, -1, 99999999999999999999999):
        with pytest.raises(InputError, match=r"--seed must be within 0\.\."):
            Workload(seed=bad).check()


def test_an_overflowing_seed_is_exit_2_before_the_run_directory_exists(tmp_path: Path) -> None:
    done = kvdoctor("consistency", "llama-3.1-8b", "--shrink", "--seed", "99999999999999999999999", "--output-dir",
                    str(tmp_path / "out"))  # fmt: skip
    assert "--seed must be within" in one_line(done)
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


# --- defect 4: unbounded workloads, refused fast (no prompt generated), dry run or not ---


@pytest.mark.parametrize(
    "command",
    [
        ("consistency", "llama-3.1-8b", "--shrink", "--dry-run"),
        ("consistency", "llama-3.1-8b", "--shrink", "--server", "vllm", "--dry-run"),
        ("pd-eval", "llama-3.1-8b", "--oracle", "tokens", "--shrink", "--device", "cpu", "--dry-run"),
    ],
    ids=["consistency", "consistency-vllm", "pd-eval-tokens"],
)
def test_a_hundred_million_requests_are_refused_by_the_memory_they_would_take(command: tuple[str, ...]) -> None:
    many = "--num-questions" if command[0] == "pd-eval" else "--requests"
    line = one_line(kvdoctor(*command, many, "100000000", timeout=FAST_S))
    assert "in memory at once" in line and "available" in line and "kvdoctor's prompts and replies" in line


def test_bench_consistency_refuses_them_too_before_any_work(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = kvdoctor("bench", "consistency", "llama-3.1-8b", "--shrink", "--requests", "100000000", "--output-dir",
                    str(out), timeout=FAST_S)  # fmt: skip
    assert "in memory at once" in one_line(done)
    assert not out.exists() or list(out.iterdir()) == []


@pytest.mark.parametrize("command", [("consistency",), ("pd-eval",)])
def test_a_billion_prompt_tokens_are_refused_by_the_models_context(command: tuple[str, ...]) -> None:
    extra = ("--oracle", "tokens", "--device", "cpu") if command[0] == "pd-eval" else ()
    done = kvdoctor(*command, "llama-3.1-8b", "--shrink", *extra, "--prompt-tokens", "1000000000", "--dry-run",
                    timeout=FAST_S)  # fmt: skip
    line = one_line(done)
    assert f"context length {MAX_POSITIONS:,}" in line and "--prompt-tokens 1,000,000,000" in line


def test_more_requests_in_flight_than_open_files_are_refused() -> None:
    done = kvdoctor("consistency", "llama-3.1-8b", "--shrink", "--requests", "600", "--concurrency", "600",
                    "--dry-run", limit_files=512)  # fmt: skip
    line = one_line(done)
    assert "600 requests in flight" in line and "may open 512 files" in line
    assert kvdoctor("consistency", "llama-3.1-8b", "--shrink", "--requests", "200", "--concurrency", "200",
                    "--dry-run", limit_files=512).returncode == 0  # fmt: skip


# --- defect 6: the context, known before launch ---


def _limit(extra: tuple[str, ...] = ()) -> context_limit.Limit:
    loaded = load_config("llama-3.1-8b")
    return context_limit.sglang(shrink(dict(loaded.top)), loaded.source, extra)


def test_sglangs_limit_is_the_shrunk_configs_context_less_what_its_scheduler_keeps() -> None:
    """SGLang serves a request whole up to its context - 2 tokens (its scheduler cuts max_new_tokens past that),
    a prompt up to the context - 7 (it aborts longer ones)."""
    limit = _limit()
    assert (limit.tokens, limit.prompt) == (MAX_POSITIONS - 2, MAX_POSITIONS - 7)  # --shrink caps llama's 131072
    context_limit.check(limit, MAX_POSITIONS - 2 - 64, 64, "sglang")
    with pytest.raises(
        InputError, match=r"4,095 tokens is longer than sglang serves whole.*at most --prompt-tokens 4,030"
    ):
        context_limit.check(limit, MAX_POSITIONS - 1 - 64, 64, "sglang")
    context_limit.check(limit, MAX_POSITIONS - 7, 5, "sglang")
    with pytest.raises(
        InputError, match=r"a prompt of --prompt-tokens 4,090 is longer than sglang takes: at most 4,089"
    ):
        context_limit.check(limit, MAX_POSITIONS - 6, 1, "sglang")


def test_each_servers_limit_is_its_table_line_and_a_refusal_cites_the_request_check_its_limit_carries() -> None:
    """``limit(server)`` reads LIMITS (no branch on the name); SGLang's refusal names its scheduler's check,
    vLLM's names none."""
    loaded = load_config("llama-3.1-8b")
    config = shrink(dict(loaded.top))
    sglang = context_limit.limit("sglang", config, loaded.source, ())
    assert sglang == context_limit.sglang(config, loaded.source, ())
    with pytest.raises(InputError) as refused:
        context_limit.check(sglang, 64, MAX_POSITIONS, "sglang")
    assert f"cut every request ({context_limit.SGLANG_REQUEST_CHECK}): use at most" in str(refused.value)
    vllm = context_limit.limit("vllm", config, loaded.source, ())
    assert vllm == context_limit.vllm(config, loaded.source, ()) and vllm.cite == ""
    with pytest.raises(InputError, match=r"cut every request: use at most a smaller --max-new-tokens"):
        context_limit.check(vllm, 64, MAX_POSITIONS, "vllm")
    with pytest.raises(KeyError, match="no context limit for server 'trt'"):
        context_limit.limit("trt", config, loaded.source, ())
    third = context_limit.Limit(100, "its context", cite="worker.py:7")  # a third server's, named by its limit
    with pytest.raises(InputError, match=r"longer than trt serves whole.*every request \(worker\.py:7\): use"):
        context_limit.check(third, 64, 64, "trt")


def test_a_context_length_after_dashdash_lowers_it_and_one_above_the_model_is_sglangs_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _limit(("--context-length", "128")).tokens == 126
    assert _limit(("--context-len", "96")).tokens == 94  # an abbreviation SGLang's parser resolves
    monkeypatch.delenv(context_limit.SGLANG_OVERRIDE_ENV, raising=False)
    with pytest.raises(InputError, match="SGLang refuses to start"):
        _limit(("--context-length", str(MAX_POSITIONS + 1)))
    monkeypatch.setenv(context_limit.SGLANG_OVERRIDE_ENV, "1")  # the servers inherit it: SGLang then serves it
    assert _limit(("--context-length", str(MAX_POSITIONS + 1))).tokens == MAX_POSITIONS - 1


def test_the_dry_run_takes_the_longest_request_and_refuses_one_more() -> None:
    base = ("consistency", "llama-3.1-8b", "--shrink", "--max-new-tokens", "64", "--dry-run")
    assert kvdoctor(*base, "--prompt-tokens", str(MAX_POSITIONS - 2 - 64)).returncode == 0
    line = one_line(kvdoctor(*base, "--prompt-tokens", str(MAX_POSITIONS - 1 - 64)))
    assert "is longer than sglang serves whole" in line
    low = ("--", "--context-length", "128")
    assert kvdoctor(*base, "--prompt-tokens", "62", *low).returncode == 0
    assert "--context-length after -- 128" in one_line(kvdoctor(*base, "--prompt-tokens", "63", *low))


def test_vllms_limit_is_the_models_length_or_a_max_model_len_after_dashdash() -> None:
    base = ("consistency", "llama-3.1-8b", "--shrink", "--server", "vllm", "--max-new-tokens", "64", "--dry-run")
    assert kvdoctor(*base, "--prompt-tokens", str(MAX_POSITIONS - 64)).returncode == 0
    line = one_line(kvdoctor(*base, "--prompt-tokens", str(MAX_POSITIONS - 63)))
    assert "4,097 tokens is longer than vllm serves whole: at most 4,096 (the model's max_model_len 4,096" in line
    line = one_line(kvdoctor(*base, "--prompt-tokens", "64", "--", "--max-model-len", str(MAX_POSITIONS + 1)))
    assert "--max-model-len 4,097 after --: vLLM refuses to start" in line
    line = one_line(kvdoctor(*base, "--prompt-tokens", "65", "--", "--max-model-len", "128"))
    assert "is longer than vllm serves whole: at most 128 (--max-model-len 128 after --)" in line


def test_the_prefix_cache_scenarios_prefix_counts_toward_the_context() -> None:
    prepared = run.prepare(run.ConsistencyOptions("llama-3.1-8b", shrink=True, server="vllm", scenario="prefix-cache"))
    assert prepared.prefix is not None
    room = MAX_POSITIONS - prepared.prefix.prefix_tokens - 64
    w = Workload(prompt_tokens=room, max_new_tokens=64)
    run.prepare(run.ConsistencyOptions("llama-3.1-8b", shrink=True, server="vllm", scenario="prefix-cache",
                                       workload=w))  # fmt: skip
    w = Workload(prompt_tokens=room + 1, max_new_tokens=64)
    with pytest.raises(InputError, match=r"the scenario's 128-token prefix \+ --prompt-tokens"):
        run.prepare(run.ConsistencyOptions("llama-3.1-8b", shrink=True, server="vllm", scenario="prefix-cache",
                                           workload=w))  # fmt: skip


def test_the_warm_up_never_asks_for_more_tokens_than_the_compared_requests() -> None:
    """A request at the limit with fewer than 4 new tokens: a 4-token warm-up would be longer than it."""
    w = Workload(max_new_tokens=1)
    warm, _ = run.warm_up(run.prepare(run.ConsistencyOptions("llama-3.1-8b", shrink=True, workload=w)))
    assert warm.per_request_tokens <= w.per_request_tokens
    assert run.warm_up(run.prepare(run.ConsistencyOptions("llama-3.1-8b", shrink=True)))[0].max_new_tokens == 4


def test_kvdoctors_rounded_max_model_len_past_an_odd_model_length_is_refused() -> None:
    """kvdoctor rounds vLLM's --max-model-len up to 32: above a model length that is no multiple of 32, vLLM would
    refuse to start though the request fits; a --max-model-len after -- replaces kvdoctor's."""
    limit = context_limit.Limit(4090, "the model's max_model_len 4,090")
    context_limit.check_own_vllm(limit, 4064, 4060, ())
    with pytest.raises(InputError, match="vLLM would refuse to start; pass -- --max-model-len 4090"):
        context_limit.check_own_vllm(limit, 4096, 4080, ())
    context_limit.check_own_vllm(limit, 4096, 4080, ("--max-model-len", "4090"))
