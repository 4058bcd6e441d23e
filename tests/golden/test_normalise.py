"""The golden normaliser replaces what is volatile and nothing a refactor could change by mistake."""

from __future__ import annotations

from pathlib import Path

from tests.golden.normalise import EPHEMERAL, FREE_POOL, Normaliser, path_placeholders

SCRATCH, REPO, FIXTURES, VENV = Path("/tmp/s1"), Path("/w/kv"), Path("/w/other/fixtures"), Path("/w/kv/.venv")


def _norm() -> Normaliser:
    return Normaliser(path_placeholders(SCRATCH, REPO, [REPO / "fixtures", FIXTURES], VENV), "0.1.0", "buildhost")


def test_deterministic_numbers_and_words_stay_verbatim() -> None:
    text = (
        "│ conv_state        │   1.9 MiB │ 1,958,414 │ 0/0    │ BAD    │ RED     │\n"
        "prediction: 252,288 tokens vs decode pool 65,536 tokens (3.8x); threshold 0.80\n"
        '  "bytes": 169984,\n  "threshold": 0.8,\n  "version": "0.5.23",\n'
        "error KVD014-SGLANG-REFUSES (sglang/srt/mem_cache/registry.py:156-158)\n"
        "consistency: --port 30000 http://127.0.0.1:30002 and the discard port http://127.0.0.1:9\n"
    )
    assert _norm()(text) == text


def test_timings_timestamps_and_run_dirs_are_replaced() -> None:
    norm = _norm()
    assert norm("  elapsed                  4.52 s   ") == "  elapsed                  <seconds> s"
    assert norm("verdict: passed — 9 components equal (4.52 s)") == "verdict: passed — 9 components equal (<seconds> s)"
    assert (
        norm("1 cases, 22 fields compared, 0 drifting, 35.3 s")
        == "1 cases, 22 fields compared, 0 drifting, <seconds> s"
    )
    assert norm('  "elapsed_s": 2.652,') == '  "elapsed_s": <seconds>,'
    assert norm('  "wall_s": 1.0034,') == '  "wall_s": <seconds>,'
    assert norm('  "timestamp": "2026-12-01T16:07:51Z",') == '  "timestamp": "<timestamp>",'
    assert norm('<testsuite time="0.013" timestamp="2026-12-01T16:07:51">') == (
        '<testsuite time="<seconds>" timestamp="<timestamp>">'
    )
    assert norm("run directory: out/run-20261201-162359-c50af712") == "run directory: out/run-<time>-<id>"


def test_free_ports_keep_their_identity_within_a_case() -> None:
    low = EPHEMERAL.start
    norm = _norm()
    line = f"--port {low + 5} --prefill http://127.0.0.1:{low + 5} --decode http://127.0.0.1:{low + 9}"
    assert norm(line) == "--port <port1> --prefill http://127.0.0.1:<port1> --decode http://127.0.0.1:<port2>"
    assert norm(f'  "bootstrap_port": {low + 9},') == '  "bootstrap_port": <port2>,'
    assert norm(f'          "--port",\n          "{low + 7}"') == '          "--port",\n          "<port3>"'
    assert norm(f'          "--tp",\n          "{low + 7}"') == f'          "--tp",\n          "{low + 7}"'
    pool = FREE_POOL.start  # kvdoctor's own free ports, below the ephemeral range
    assert norm(f"--port {pool + 3} http://127.0.0.1:{low + 5}") == "--port <port4> http://127.0.0.1:<port1>"


def test_paths_version_and_host_are_replaced_longest_first() -> None:
    norm = _norm()
    assert norm("  model     /w/kv/fixtures/models/inkling-small.json      ") == (
        "  model     <fixtures>/models/inkling-small.json"
    )
    assert norm("data: /w/other/fixtures/gsm8k/test.jsonl") == "data: <fixtures>/gsm8k/test.jsonl"
    assert norm("SGLang 0.5.23 (/w/kv/.venv/lib/sglang) /w/kv/x /tmp/s1/a.xml") == (
        "SGLang 0.5.23 (<venv>/lib/sglang) <repo>/x <scratch>/a.xml"
    )
    assert norm("  engine    kvdoctor 0.1.0 (its own model)") == "  engine    kvdoctor <version> (its own model)"
    assert norm('  "kvdoctor_version": "0.1.0",') == '  "kvdoctor_version": "<version>",'
    engine = '  "engine": {\n    "name": "kvdoctor",\n    "version": "0.1.0",'
    assert norm(engine) == '  "engine": {\n    "name": "kvdoctor",\n    "version": "<version>",'
    sglang = '  "engine": {\n    "name": "sglang",\n    "version": "0.1.0",'
    assert norm(sglang) == sglang  # another engine's version is that engine's, not kvdoctor's
    assert norm('hostname="buildhost"') == 'hostname="<hostname>"'


def test_an_unchanged_line_keeps_its_trailing_spaces() -> None:
    assert _norm()("Round trip OK        \n  kv cache  mxfp8     ") == "Round trip OK        \n  kv cache  mxfp8     "
