"""The replay cases (``kvdoctor.core.replays``) held to the registry: a case's fault is registered and names the
bug it replays; a pending case's fault is not registered yet (else it should run); every bug, model and scenario
a case names exists."""

from __future__ import annotations

import pytest

from kvdoctor.consistency import scenarios
from kvdoctor.core import bugs, faults, replays
from kvdoctor.core.config import resolve_config_path
from kvdoctor.core.faults import Target
from kvdoctor.core.replays import Outcome, Replay


def _record(r: Replay) -> faults.Fault:
    assert r.fault is not None
    return faults.get(r.fault, server=r.server, target=r.target)


@pytest.mark.parametrize("case", replays.replays(), ids=lambda r: r.bug)
def test_every_case_s_fault_is_registered_and_names_its_bug(case: Replay) -> None:
    if case.fault is None:
        assert case.control_args and case.target is Target.SERVER  # the real server: its control is a workaround
        return
    try:
        record = _record(case)
    except KeyError as exc:
        pytest.fail(f"{case.bug}: its fault is not registered ({exc.args[0]}); list the case in its room's PENDING")
    assert case.bug in record.replays, f"{case.fault}'s record does not name {case.bug} in replays"


def test_pending_cases_wait_for_faults_that_are_not_registered_yet() -> None:
    landed = []
    for r in replays.pending():
        try:
            _record(r)
        except KeyError:
            continue
        landed.append(f"{r.bug} ({r.fault})")
    assert not landed, f"registered now, so these cases should run: move them from PENDING to REPLAYS: {landed}"


def test_every_case_names_a_known_bug_model_and_scenario_once() -> None:
    every = (*replays.replays(), *replays.pending())
    assert len({r.bug for r in every}) == len(every)
    for r in every:
        assert r.bug in bugs.ids()
        assert resolve_config_path(r.model).parent.name in ("models", "replay"), r.model  # shipped with kvdoctor
        assert r.scenario in (*scenarios.names(), "roundtrip"), r.scenario
        assert r.expect.outcome is Outcome.RED or r.expect.line  # a loud case names the server's line


def test_get_tells_unknown_pending_and_replayed_apart() -> None:
    assert replays.get("SGLANG#23773").fault == "drop-pd-state"
    with pytest.raises(KeyError, match="no such bug"):
        replays.get("sglang#1")
    with pytest.raises(KeyError, match="has no replay case"):
        replays.get("vllm-musa#221")
    if replays.pending():
        waiting = replays.pending()[0]
        with pytest.raises(KeyError, match=f"not replayed yet: its fault {waiting.fault}"):
            replays.get(waiting.bug)


def test_the_commands_say_how_to_run_each_side_by_hand() -> None:
    overlap = replays.get("kvdoctor#overlap")
    sized = "--requests 16 --prompt-tokens 16 --max-new-tokens 48 --concurrency 16"  # its workload, as options
    assert overlap.command() == (
        f"kvdoctor consistency lfm2-1.2b --shrink --server sglang --topology pd --scenario preempt {sized}"
    )
    assert overlap.command(control=True).endswith(f"--scenario preempt {sized} -- --disable-overlap-schedule")
    trip = next(r for r in replays.replays() if r.in_process)
    assert trip.command().startswith(f"kvdoctor roundtrip {trip.model} --server vllm --engine vllm --inject")
