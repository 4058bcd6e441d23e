"""Read in a CI log: piped at 80 columns under NO_COLOR, nothing a user needs is cut or broken."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

HOST_POOL = [
    "inspect",
    "inkling-small",
    "--kv-cache-dtype",
    "mxfp8",
    "--disaggregation-mode",
    "decode",
    "--disaggregation-decode-retraction-backup",
    "host_pool",
]
VLLM = ["inspect", "gpt-oss-20b", "--server", "vllm", "--kv-transfer-config", '{"kv_connector":"LMCacheConnectorV1"}']


def run(*args: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "kvdoctor", *args], capture_output=True, text=True, timeout=120, check=False, env=env
    )


def words(text: str) -> str:
    """The text with its wrapping undone: table borders dropped, all whitespace one space."""
    return " ".join(text.replace("│", " ").split())


def test_inspect_at_80_columns_piped_prints_every_hazards_whole_advice() -> None:
    out = run(*HOST_POOL)
    assert out.returncode == 0, out.stderr
    assert "…" not in out.stdout
    assert max(len(line) for line in out.stdout.splitlines()) <= 80
    hazards = json.loads(run(*HOST_POOL, "--json").stdout)["hazards"]
    assert {h["code"] for h in hazards} >= {"KVD001-SSM-ON-HOST-POOL", "KVD014-SGLANG-REFUSES"}
    for h in hazards:  # every sentence, wrapped at words: no flag name broken in two
        assert words(h["message"]) in words(out.stdout), h["code"]
    assert "--disaggregation-decode-retraction-backup host_pool" in out.stdout


def test_inspect_at_80_columns_keeps_names_and_rule_sources_whole() -> None:
    out = run(*HOST_POOL)
    report = json.loads(run(*HOST_POOL, "--json").stdout)
    for c in report["components"]:  # on one line each, never folded mid-word
        for value in (c["name"], c["pool"], c["dtype"]):
            assert value in out.stdout, value
    assert "[mamba2_config; srt/configs/hybrid_arch.py" in out.stdout  # markup-looking source, shown literally


def test_values_print_as_a_person_writes_them() -> None:
    out = run(*HOST_POOL).stdout
    for python_spelling in ("hicache_ratio None", "uses_ssm_state=", "from GPU memory tokens", "None", "True", "False"):
        assert python_spelling not in out
    assert re.search(r"uses SSM state\s+│ yes\s", out) and re.search(r"CPU copy carries mamba\s+│ no\s", out)
    assert "sized from free GPU memory at start-up" in out


def test_every_mode_ends_with_exactly_one_verdict_line() -> None:
    for args, word in ((HOST_POOL, "passed with warnings"), ([*HOST_POOL, "--strict"], "FAILED"), (VLLM, "passed")):
        out = run(*args)
        lines = out.stdout.rstrip("\n").splitlines()
        assert [line for line in lines if line.startswith("verdict:")] == [lines[-1]], out.stdout[-400:]
        assert lines[-1].startswith(f"verdict: {word}")
        assert len(lines[-1]) <= 80


def test_vllm_tables_at_80_columns_keep_spec_names_whole() -> None:
    out = run(*VLLM)
    assert out.returncode == 0, out.stderr
    assert "…" not in out.stdout and max(len(line) for line in out.stdout.splitlines()) <= 80
    assert "FullAttentionSpec" in out.stdout
    advice = json.loads(run(*VLLM, "--json").stdout)["hazards"]
    for h in advice:
        assert words(h["message"]) in words(out.stdout), h["code"]


def test_wide_console_keeps_the_tables() -> None:
    out = run(*HOST_POOL, columns=200)
    assert re.search(r"┃ severity\s+┃ code\s+┃ what to do", out.stdout)
    assert re.search(r"│ full_kv\s+│ MHATokenToKVPoolMXFP8\s+│ per_token", out.stdout)


def test_no_width_cuts_the_components_tables_last_column() -> None:
    """Between 'narrow' and 'wide' a fixed threshold let the wide table overflow and lose its right edge
    (at 120 columns: `480.0 KiB/reques`); the layout is now chosen by measuring the table."""
    for columns in (110, 120, 125, 130):
        out = run(*HOST_POOL, columns=columns)
        assert out.returncode == 0, out.stderr
        section = out.stdout.split("State components")[1].split("Pools")[0]
        for line in section.splitlines()[1:]:
            assert len(line) <= columns, (columns, line)
            assert line.rstrip()[-1] in "│┃┐┓┘┛┤┨┫", (columns, line)  # the table's right edge is there
        assert "KiB/request" in words(section), columns
