"""``kvdoctor bench pd-eval`` runs end to end (tiny sizes; the numbers themselves are not tested)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kvdoctor.cli.app import app
from tests.pd.helpers import GSM8K


def test_bench_reports_both_clients() -> None:
    args = ["bench", "pd-eval", "--data-path", str(GSM8K), "--num-questions", "16", "--parallel", "4",
            "--repeats", "1", "--json"]
    run = CliRunner().invoke(app, args, catch_exceptions=False)
    assert run.exit_code == 0, run.output
    data = json.loads(run.stdout)
    assert [loop["name"] for loop in data["loops"]] == ["sharded", "single pool"]
    assert all(loop["requests"] == 16 for loop in data["loops"])
