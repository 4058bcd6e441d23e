"""Read in a CI log: piped at 80 columns, nothing a user needs is cut with an ellipsis."""

from __future__ import annotations

import os
import subprocess
import sys


def test_inspect_at_80_columns_piped_cuts_nothing() -> None:
    env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1"}
    args = [
        "inspect",
        "inkling-small",
        "--kv-cache-dtype",
        "mxfp8",
        "--disaggregation-mode",
        "decode",
        "--disaggregation-decode-retraction-backup",
        "host_pool",
    ]
    out = subprocess.run(
        [sys.executable, "-m", "kvdoctor", *args], capture_output=True, text=True, timeout=120, check=False, env=env
    )
    assert out.returncode == 0, out.stderr
    assert "…" not in out.stdout
    assert max(len(line) for line in out.stdout.splitlines()) <= 80
    # the last column of the hazard table, read top to bottom, holds the whole advice (folded, not cut)
    advice = "".join(
        line.rstrip(" │").rsplit("│", 1)[-1].strip() for line in out.stdout.splitlines() if line.startswith("│")
    )
    assert "--disaggregation-decode-retraction-backup host_pool" in advice
    assert "KVD001-SSM-ON-HOST-POOL" in out.stdout
