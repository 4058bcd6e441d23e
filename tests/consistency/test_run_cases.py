"""Many cases on one deployment (``run.run_cases``, issue 30 item 7): the reference launched and measured once,
each case's fault armed inside the servers only while its own burst runs, the subject's caches reset between cases,
one result per case with the in-server events of its own burst; refusals before anything starts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kvdoctor._exceptions import EXIT_DEPLOYMENT, DeploymentError, InputError
from kvdoctor.consistency import checkpoint, run
from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.prepared import ConsistencyOptions
from kvdoctor.consistency.result import Burst
from kvdoctor.consistency.servers.sglang import deployment as sglang_room
from kvdoctor.consistency.workload import Workload
from kvdoctor.core import faults as registry
from kvdoctor.core.faults import Fault, Needs, Role, StatePath, Target
from kvdoctor.engines import hook_log

ROOM = type(sglang_room.DEPLOYMENT)
GOOD = tuple(Generation(tokens=(7, 8, 9, 10), logprobs=(-0.1,) * 4) for _ in range(4))
BAD = (Generation(tokens=(7, 8, 1, 2), logprobs=(-0.1,) * 4), *GOOD[1:])


def _fault(name: str, switchable: bool = True) -> Fault:
    return Fault(
        name, "sglang", Target.SERVER, StatePath.PREFIX_HIT, Role.SINGLE, (), "test", Needs.ANY, (), (), switchable
    )


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server_environment: None) -> dict[str, Any]:
    """A prepared Llama run whose launch, warm-up and bursts are the test's: each burst sees the arm file as the
    servers would, and the 'servers' log a fault firing when armed."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    monkeypatch.setattr(
        run.checkpoint, "ensure", lambda *a: checkpoint.Checkpoint(ckpt, "c" * 64, 0, "w" * 64, cached=True)
    )
    faults = {f.name: f for f in (_fault("f-one"), _fault("f-two"), _fault("stuck", switchable=False))}
    real_get = registry.get
    monkeypatch.setattr(registry, "get", lambda name, **kw: faults.get(name) or real_get(name, **kw))
    monkeypatch.setattr(ROOM, "check_fault", lambda self, o, kind: None)
    seen: dict[str, Any] = {"armed": [], "resets": [], "measured": []}
    monkeypatch.setattr(ROOM, "reset", lambda self, p, url, t: seen["resets"].append(url))
    monkeypatch.setattr(run, "_launch", lambda s, d: None)
    monkeypatch.setattr(run, "_warm_up", lambda s, d: None)

    def measure(s: Any, deployment: Any, name: str, url: str, metrics: str, times: int) -> Any:
        s.server.mark(s.prepared, s.run_dir, name)
        armed = Path(deployment.arm_file).read_text().split() if deployment.arm_file else []
        seen["armed"].append((name, armed))
        log = s.run_dir / sglang_room.HOOK_LOG
        for fault in armed:  # what an armed fault inside a server writes when it fires
            with log.open("a") as fh:
                fh.write(f"123 fault-installed {fault}\n123 fault-fired {fault} request=0\n")
        gens = BAD if armed else GOOD
        burst = Burst(name, url, 1.0, 16, 16.0, 4.0, 4.0)
        count = 3 if name.startswith("pressured") else 0
        return run._Measured(tuple(list(gens) for _ in range(times)), (burst,) * times, count, "metrics", {})

    monkeypatch.setattr(run, "_measure", measure)
    o = ConsistencyOptions(
        model="llama-3.1-8b",
        topology="pd",
        shrink=True,
        workload=Workload(requests=4, max_new_tokens=4, concurrency=2),
        output_dir=tmp_path / "out",
    )
    seen["prepared"] = replace(run.prepare(o), stand_in=False)
    return seen


def test_every_case_has_its_own_burst_its_own_fault_armed_and_one_reference(world: dict[str, Any]) -> None:
    cases = (run.Case("control"), run.Case("one", "f-one"), run.Case("two", "f-two"))
    results = run.run_cases(world["prepared"], cases)
    assert [name for name, _ in world["armed"]] == ["reference", "pressured:control", "pressured:one", "pressured:two"]
    assert [armed for _, armed in world["armed"]] == [[], [], ["f-one"], ["f-two"]]  # the reference: nothing armed
    assert len(world["resets"]) == 2  # before every case but the first
    assert [r.fault.name if r.fault else None for r in results] == [None, "f-one", "f-two"]
    assert [r.identical for r in results] == [4, 3, 3] and results[0].exit_code == 0
    assert len({r.run_dir for r in results}) == 1
    log = hook_log.read(Path(results[0].run_dir) / sglang_room.HOOK_LOG)
    one = log.bursts("reference", "reference-repeat", "pressured:one")
    assert one.details("fault-fired") == ["f-one request=0"]  # not f-two's firing


def test_a_server_dying_in_a_case_fails_that_case_and_every_later_one(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = run._compare
    calls = {"n": 0}

    def compare(s: Any, ref: Any, press: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise DeploymentError("the subject died")
        real(s, ref, press)

    monkeypatch.setattr(run, "_compare", compare)
    cases = (run.Case("control"), run.Case("one", "f-one"), run.Case("two", "f-two"))
    results = run.run_cases(world["prepared"], cases)
    assert results[0].exit_code in (0, 1) and results[0].total == 4
    assert [r.exit_code for r in results[1:]] == [EXIT_DEPLOYMENT, EXIT_DEPLOYMENT]
    assert "the subject died" in results[2].message


def test_a_failure_after_the_last_case_still_lands_on_it(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C or a kvdoctor bug during teardown, every case measured: the last case says so (never a silent pass)."""
    real = run._deploy_and_compare

    def then_fail(*args: Any) -> None:
        real(*args)
        raise RuntimeError("teardown went wrong")

    monkeypatch.setattr(run, "_deploy_and_compare", then_fail)
    results = run.run_cases(world["prepared"], (run.Case("control"), run.Case("one", "f-one")))
    assert results[0].exit_code in (0, 1) and results[1].exit_reason == "internal_error"


def test_a_fault_file_run_is_one_case_per_launch(world: dict[str, Any], tmp_path: Path) -> None:
    prepared = world["prepared"]
    with_file = replace(prepared, options=replace(prepared.options, fault_file=tmp_path / "mine.py"))
    with pytest.raises(InputError, match="--fault-file is armed for the whole pressured burst"):
        run.check_cases(with_file, (run.Case("control"), run.Case("one", "f-one")))


@pytest.mark.parametrize(
    ("cases", "said"),
    [
        ((), "one or more cases"),
        ((run.Case("a"), run.Case("a", "f-one")), "distinct names"),
        ((run.Case("a"), run.Case("b", "stuck")), "cannot be switched at run time"),
    ],
)
def test_cases_that_cannot_share_a_deployment_are_refused_before_anything_starts(
    world: dict[str, Any], cases: tuple[run.Case, ...], said: str
) -> None:
    out = world["prepared"].options.output_dir
    with pytest.raises(InputError, match=said):
        run.run_cases(world["prepared"], cases)
    assert not Path(out).exists()


def test_one_case_is_the_plain_run_with_its_burst_named_pressured(world: dict[str, Any]) -> None:
    result = run.run(world["prepared"])
    assert [name for name, _ in world["armed"]] == ["reference", "pressured"]
    assert world["resets"] == [] and result.identical == 4
