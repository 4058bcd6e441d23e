"""``--scenario transfer`` and the loud retraction replay on real SGLang 0.5.23 servers (.venv-server/; minutes each).

LFM2 over PD with both decodes roomy: nothing retracts, every request crosses the transfer (kvdoctor's observer
counts the prefill's sends and the decode's commits), and the deployment is identical to its reference (the
control); with ``drop-pd-state`` on the shared prefill (sglang#23773), armed for the pressured burst only, it is red
with the first divergence named, and with ``clear-pd-state`` on the pressured decode (sglang#32995) red too.
``retract-raise`` (sglang#33385) kills the pressured decode at its first retraction backup: exit 3, the message
leading with the server's own ``NotImplementedError`` line and the retraction count. All ``matrix``: CI runs the
control and ``drop-pd-state`` on one launch through ``kvdoctor replay`` (test_replay_servers.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.consistency.test_servers import assert_clean, consistency

pytestmark = pytest.mark.server

TINY = ("--requests", "4", "--prompt-tokens", "16", "--max-new-tokens", "24", "--concurrency", "4")
SMALL = ("--requests", "8", "--prompt-tokens", "16", "--max-new-tokens", "32", "--concurrency", "8")


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("transfer")


def gate(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(g for g in doc["gates"] if g["name"] == name)


@pytest.mark.matrix  # the control of the transfer replays: ~4-5 min
def test_lfm2_pd_transfer_is_identical_with_every_request_transferred_and_nothing_retracted(out: Path) -> None:
    code, doc = consistency(out, "lfm2-1.2b", "--topology", "pd", "--scenario", "transfer", workload=TINY)
    assert code == 0, doc["message"]
    assert doc["scenario"] == "transfer" and doc["retractions"] == {"reference": 0, "pressured": 0}
    t = doc["transfer"]
    assert t["requests"] == t["sent"] == t["state_sent"] == t["committed"] == 4
    assert gate(doc, "transfer")["passed"] and doc["deployment"]["injected_role"] is None
    assert_clean(doc)


@pytest.mark.matrix
def test_lfm2_pd_with_the_state_dropped_at_the_prefill_is_red_naming_the_first_divergence(out: Path) -> None:
    code, doc = consistency(
        out, "lfm2-1.2b", "--topology", "pd", "--scenario", "transfer", "--inject", "drop-pd-state", workload=TINY
    )
    assert code == 1, doc["message"]
    assert doc["deployment"]["injected_role"] == "prefill"
    fired = gate(doc, "fault-fired")
    assert fired["passed"] and "reported 4 request(s)' recurrent state sent" in fired["message"], fired
    assert gate(doc, "transfer")["passed"]  # the path ran for every request: the fault, not a missing path
    red = [g for g in doc["gates"] if not g["passed"]]
    assert red and red[0]["name"] in ("tokens", "logprobs"), red
    tokens = gate(doc, "tokens")
    assert tokens["passed"] or "first: request" in tokens["message"], tokens
    assert_clean(doc)


@pytest.mark.matrix  # ~5 min
def test_lfm2_pd_with_the_transferred_state_cleared_at_the_decode_is_red(out: Path) -> None:
    code, doc = consistency(
        out, "lfm2-1.2b", "--topology", "pd", "--scenario", "transfer", "--inject", "clear-pd-state", workload=TINY
    )
    assert code == 1, doc["message"]
    assert doc["deployment"]["injected_role"] == "decode-pressured"
    assert gate(doc, "fault-fired")["passed"] and gate(doc, "transfer")["passed"]
    red = [g for g in doc["gates"] if not g["passed"]]
    assert red and red[0]["name"] in ("tokens", "logprobs"), red


@pytest.mark.matrix  # ~3 min: Llama over PD until its first retraction
def test_retract_raise_exits_3_with_the_server_s_own_error_and_the_retraction_count(out: Path) -> None:
    code, doc = consistency(out, "llama-3.1-8b", "--topology", "pd", "--inject", "retract-raise", workload=SMALL)
    assert code == 3, doc["message"]
    head = doc["message"].splitlines()[0]
    assert head.startswith("decode-pressured died: NotImplementedError: "), head
    assert "does not support get_cpu_copy" in head and "retraction backup(s) begun" in head, head
    assert doc["gates"] == [] and doc["requests"] == []  # never a score from a dead server
    assert doc["survivors"] == []
