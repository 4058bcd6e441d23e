"""Teardown on every path: escaped grandchildren, servers that ignore SIGTERM, Ctrl-C, SIGTERM.

Each protection has a twin test that switches it off and sees the leak, so the check has teeth.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from kvdoctor._exceptions import Interrupted
from kvdoctor.deploy import reaper, signals, supervisor
from kvdoctor.pd import run as run_mod
from tests.pd.helpers import KVDOCTOR, ROOT, SERVER, default_sigint, invoke, pd_args, pid_alive, result_json

pytestmark = pytest.mark.usefixtures("no_leftovers")


def escapee_pid(pidfile: Path) -> int:
    return int(pidfile.read_text())


@pytest.mark.parametrize("kind", ["setsid", "daemon", "daemon-noenv"])
def test_grandchild_that_left_the_group_is_stopped(tmp_path: Path, knobs: Callable[..., None], kind: str) -> None:
    pidfile = tmp_path / "escapee.pid"
    knobs(DECODE_ESCAPE=kind, DECODE_ESCAPE_PIDFILE=str(pidfile))
    run = invoke(pd_args(tmp_path / "out"))
    assert run.exit_code == 0, run.output
    assert not pid_alive(escapee_pid(pidfile))


def test_without_the_sweeps_a_setsid_grandchild_leaks(
    tmp_path: Path, knobs: Callable[..., None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Teeth: killpg alone misses a grandchild that called setsid."""
    pidfile = tmp_path / "escapee.pid"
    knobs(DECODE_ESCAPE="setsid", DECODE_ESCAPE_PIDFILE=str(pidfile))
    monkeypatch.setattr(supervisor.Supervisor, "_remember_descendants", lambda *_: None)
    monkeypatch.setattr(supervisor.Supervisor, "_remember_adopted", lambda *_: None)
    monkeypatch.setattr(supervisor, "marked_processes", lambda *_: [])
    assert invoke(pd_args(tmp_path / "out")).exit_code == 0
    pid = escapee_pid(pidfile)
    try:
        assert pid_alive(pid), "the escapee should have leaked with the sweeps disabled"
    finally:
        kill_and_reap(pid)


@contextlib.contextmanager
def no_subreaper() -> Iterator[bool]:
    yield False


def test_without_the_subreaper_a_daemon_with_a_cleared_environment_leaks(
    tmp_path: Path, knobs: Callable[..., None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Teeth for the subreaper: setsid + double fork + cleared env escapes every other sweep."""
    pidfile = tmp_path / "escapee.pid"
    knobs(DECODE_ESCAPE="daemon-noenv", DECODE_ESCAPE_PIDFILE=str(pidfile))
    monkeypatch.setattr(reaper, "child_subreaper", no_subreaper)
    run = invoke(pd_args(tmp_path / "out"))
    pid = escapee_pid(pidfile)
    try:
        assert run.exit_code == 0, run.output  # the leak goes unnoticed: nothing can see it
        assert pid_alive(pid), "without the subreaper the daemon should have escaped"
        assert "KVDOCTOR_RUN_ID" not in psutil.Process(pid).environ()
    finally:
        kill_and_reap(pid)


def test_a_process_surviving_teardown_fails_the_run(
    tmp_path: Path, knobs: Callable[..., None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A survivor is named in the result and turns a pass into exit 3 (it holds ports, GPUs)."""
    pidfile = tmp_path / "escapee.pid"
    knobs(DECODE_ESCAPE="daemon-noenv", DECODE_ESCAPE_PIDFILE=str(pidfile))
    monkeypatch.setattr(supervisor, "_kill", lambda _proc: None)  # as if it ignored SIGKILL
    monkeypatch.setattr(supervisor, "SWEEP_WAIT_S", 0.5)
    run = invoke(pd_args(tmp_path / "out", "--json"))
    pid = escapee_pid(pidfile)
    try:
        assert run.exit_code == 3, run.output
        data = json.loads(run.stdout)
        assert data["passed"] is False and data["exit_reason"] == "processes_survived"
        assert f"escaped pid {pid}" in data["message"] and data["accuracy"] == 1.0
        assert result_json(tmp_path / "out") == data
    finally:
        kill_and_reap(pid)


# kvdoctor as a separate process, with the parent-death signal on or (to prove it matters) off.
KVDOCTOR_PDEATHSIG = [
    sys.executable,
    "-c",
    "import sys\n"
    "import kvdoctor.deploy.supervisor as s\n"
    "if sys.argv.pop(1) == 'off':\n"
    "    s.PARENT_DEATH_SIGNAL = None\n"
    "from kvdoctor.cli.app import main\n"
    "main()\n",
]


@pytest.mark.parametrize("pdeathsig", ["on", "off"])
def test_servers_die_with_a_sigkilled_kvdoctor(tmp_path: Path, knobs: Callable[..., None], pdeathsig: str) -> None:
    """SIGKILL runs no teardown; the kernel's parent-death signal still stops every server."""
    knobs(DECODE_HANG_SECONDS="120", DECODE_HANG_AFTER="1")
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [*KVDOCTOR_PDEATHSIG, pdeathsig, *pd_args(out)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    started: list[psutil.Process] = []
    try:
        wait_for(lambda: any("request #2" in log.read_text() for log in out.glob("run-*/decode.log")))
        started = psutil.Process(proc.pid).children()
        assert len(started) == 3
        proc.kill()
        assert proc.wait(timeout=30) == -signal.SIGKILL
        if pdeathsig == "on":
            wait_for(lambda: not any(pid_alive(p.pid) for p in started))
        else:
            assert all(pid_alive(p.pid) for p in started), "without it the servers outlive kvdoctor"
    finally:
        if proc.poll() is None:
            proc.kill()
        for server in started:
            kill_and_reap(server.pid)


def kill_and_reap(pid: int) -> None:
    """SIGKILL ``pid`` and wait until it is gone (reaping it if it was adopted by this process)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(pid))  # SIGKILL lands asynchronously
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def test_only_the_marker_finds_a_double_forked_daemon(tmp_path: Path) -> None:
    """Teeth for the marker sweep: a daemon is no descendant, so no tree walk can see it."""
    pidfile = tmp_path / "daemon.pid"
    code = (
        "import os, sys, time\n"
        "if os.fork():\n    os._exit(0)\n"
        "os.setsid()\n"
        "open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid()))\n"
        "os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n"
        "time.sleep(3600)\n"
    )
    env = {**os.environ, supervisor.RUN_MARKER_ENV: "run-under-test"}
    subprocess.run([sys.executable, "-c", code, str(pidfile)], env=env, check=True, timeout=30)
    wait_for(pidfile.exists)
    pid = escapee_pid(pidfile)
    try:
        assert pid not in {p.pid for p in psutil.Process().children(recursive=True)}
        marked = supervisor.marked_processes(supervisor.RUN_MARKER_ENV, "run-under-test")
        assert [p.pid for p in marked] == [pid]
    finally:
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not pid_alive(pid))


def test_server_ignoring_sigterm_is_killed_after_grace(
    tmp_path: Path, knobs: Callable[..., None], monkeypatch: pytest.MonkeyPatch
) -> None:
    knobs(DECODE_IGNORE_SIGTERM="1", DECODE_RETRACT_EVERY="0")
    options = run_mod.PdEvalOptions(
        model="m",
        data_path=ROOT / "fixtures/gsm8k/test.jsonl",
        num_questions=4,
        parallel=2,
        launcher=SERVER,
        router_launcher=SERVER.replace("server.py", "router.py"),
        output_dir=tmp_path,
        grace_s=0.3,
        allow_no_retraction=True,
    )
    supervisors: list[supervisor.Supervisor] = []

    class Recording(supervisor.Supervisor):
        def __enter__(self) -> supervisor.Supervisor:
            supervisors.append(self)
            return super().__enter__()

    monkeypatch.setattr(run_mod, "Supervisor", Recording)
    result = run_mod.run(run_mod.prepare(options, download=False))
    assert result.exit_code == 0, result.message
    ended = {proc.role: proc.ended for proc in supervisors[0].procs}
    # decode ignored SIGTERM: the grace period expired and SIGKILL stopped it.
    assert ended == {"prefill": supervisor.SIGTERMED, "decode": supervisor.SIGKILLED, "router": supervisor.SIGTERMED}
    assert supervisors[0].survivors == []


def test_a_process_surviving_sigkill_is_reported_not_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process in uninterruptible sleep never dies: teardown must not wait for it forever."""
    with supervisor.Supervisor(tmp_path, grace_s=0.0) as sup:
        proc = sup.start("decode", ("python", "-c", "import time; time.sleep(60)"), {})
        real = proc.popen

        class Unkillable:
            pid = real.pid

            def poll(self) -> None:
                return None

            def wait(self, timeout: float | None = None) -> int:
                assert timeout is not None, "an unbounded wait would hang the CI job"
                raise subprocess.TimeoutExpired("decode", timeout)

        proc.popen = Unkillable()  # type: ignore[assignment]
        monkeypatch.setattr(supervisor, "KILL_WAIT_S", 0.01)
    real.wait(timeout=30)  # the real process did get SIGKILL
    assert proc.ended == supervisor.SURVIVED
    assert sup.survivors == [f"decode (pid {real.pid})"]


def test_second_signal_while_unwinding_does_not_raise_again() -> None:
    """A second Ctrl-C raised inside a ``__exit__`` would skip the teardown it interrupts."""
    latch = signals.SignalLatch()
    with pytest.raises(signals.Interrupted):
        latch.handler(signal.SIGINT, None)
    latch.handler(signal.SIGTERM, None)  # returns: the first signal is already unwinding
    assert latch.signum == signal.SIGINT


def wait_for(predicate: Callable[[], bool], timeout_s: float = 30.0) -> None:
    """Poll a condition with a deadline (synchronising on an observable state, not a delay)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


@pytest.mark.parametrize(
    ("sig", "code", "line"),
    [(signal.SIGINT, 130, "kvdoctor: interrupted"), (signal.SIGTERM, 143, "kvdoctor: terminated")],
)
def test_signal_mid_eval_tears_down(
    tmp_path: Path, knobs: Callable[..., None], sig: signal.Signals, code: int, line: str
) -> None:
    """Teardown, result.json, the exit code, and the one stderr line every command ends a signal with
    (pd-eval once printed none: its result table said "interrupted" on stdout only)."""
    knobs(DECODE_HANG_SECONDS="120", DECODE_HANG_AFTER="1")
    out = tmp_path / "out"
    cmd = [*KVDOCTOR, *pd_args(out)]
    stderr = tmp_path / "stderr"
    with stderr.open("w") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, preexec_fn=default_sigint)
    try:
        # The eval is in flight once decode has taken a request after the smoke request.
        wait_for(lambda: any("request #2" in log.read_text() for log in out.glob("run-*/decode.log")))
        started = [psutil.Process(p.pid) for p in psutil.Process(proc.pid).children()]
        assert len(started) == 3
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == code
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not any(pid_alive(p.pid) for p in started)
    data = result_json(out)
    assert data["exit_reason"] == "interrupted" and data["exit_code"] == code
    lines = stderr.read_text().splitlines()
    assert [x for x in lines if x.startswith("kvdoctor:")] == [line], lines


@pytest.mark.parametrize(
    ("raised", "code", "line"),
    [
        (KeyboardInterrupt(), 130, "kvdoctor: interrupted"),
        (Interrupted(signal.SIGTERM), 143, "kvdoctor: terminated"),
    ],
    ids=["ctrl-c", "sigterm"],
)
def test_the_command_itself_says_it_was_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raised: BaseException, code: int, line: str
) -> None:
    """The line comes from pd-eval, after its teardown and reports, not from an entry point that might
    add it: driven in-process (no ``main``), a signal mid-run still ends with exactly that one line."""

    def stopped(*_args: object) -> None:
        raise raised

    monkeypatch.setattr(run_mod, "_evaluate", stopped)
    out = tmp_path / "out"
    run = invoke(pd_args(out))
    assert run.exit_code == code, run.output
    assert [x for x in run.stderr.splitlines() if x.startswith("kvdoctor:")] == [line]
    assert result_json(out)["exit_reason"] == "interrupted"
