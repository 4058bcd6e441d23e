"""Start servers in their own sessions, wait for health, watch for exits, and leave nothing behind.

Why this shape: SGLang's schedulers detach from the launcher's process tree while starting
(sglang PR #31645), so a parent→child walk at teardown misses them and they keep ports and GPU
memory for hours. Every child therefore starts in a new session (its own process group) and is
stopped with ``killpg`` (SIGTERM, a grace period, SIGKILL). Two sweeps catch what leaves the group:
descendants seen while running (psutil snapshots, kept with their start time so a reused pid is
never killed), and any process carrying this run's marker in its environment (inherited by every
descendant, even a double-forked daemon reparented to init). A daemon that also cleared its
environment is caught because kvdoctor is the run's child subreaper (``kvdoctor.deploy.reaper``): it
is reparented to us, so it is among our own children. Whatever is still running after all that is
a *survivor*: named in the result, and the run fails (exit 3). Every server also gets a
parent-death signal, so a SIGKILLed kvdoctor takes its servers with it.

Health counts only for the process we started: a 200 from a port whose listener is not in our
process tree (a foreign server on a pinned or raced port) is not "healthy". A listener that is not ours and
accepts without answering (taken between the port's choice and the server's bind, e.g. by another server's
gloo group) fails the wait at once: the server could not bind its port, and SGLang's warm-up thread would
otherwise poll that listener for 12 minutes before killing its own server (``kvdoctor.deploy.ports``).

kvdoctor owns the variables its in-server code reads (``hook_log.CONTROL_ENV``: the fault to inject, the
patches, the logs): a server gets only those its step sets. One inherited from kvdoctor's own environment
(``KVDOCTOR_INJECT`` exported in a shell or a CI job) is dropped and named in ``warnings``; passed on, it would
install a fault nobody asked for in every server and the run would blame the server for it.

A signal that arrives while ``Popen`` forks is held until the child is started and recorded: raised there, the
latch's exception lands in whatever runs at that instant, such as logging's at-fork hook, which prints it as
"Exception ignored" with a traceback (and the output contract is one line).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.parse
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import httpx
import psutil

from kvdoctor._exceptions import ForeignServer, ServerExited, ServerUnhealthy
from kvdoctor.deploy import reaper
from kvdoctor.deploy.http import verify_for
from kvdoctor.deploy.signals import SignalLatch, signals_ignored
from kvdoctor.engines.hook_log import CONTROL_ENV

RUN_MARKER_ENV = "KVDOCTOR_RUN_ID"
POLL_INTERVAL_S = 0.1
HEALTH_TIMEOUT_S = 5.0  # one health request (never past the run's deadline)
# Sent by the kernel to every server when kvdoctor dies (None: off; tests switch it off to prove it matters).
PARENT_DEATH_SIGNAL: signal.Signals | None = signal.SIGKILL
LOG_TAIL_LINES = 40
# After SIGKILL a process in uninterruptible sleep (a hung GPU driver call) may never die:
# teardown reports it instead of hanging the CI job.
KILL_WAIT_S = 10.0
SWEEP_WAIT_S = 5.0  # for escapees after their SIGKILL (a new parent may reap them late)
# How each started process ended (``Managed.ended``).
EXITED, SIGTERMED, SIGKILLED, SURVIVED = "exited", "sigterm", "sigkill", "survived"


@dataclass
class Managed:
    """One started process with its log, and every descendant seen so far."""

    role: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    log_file: TextIO
    seen: dict[int, float] = field(default_factory=dict)  # pid -> create_time
    ended: str = ""  # EXITED on its own, SIGTERMED, SIGKILLED, or SURVIVED SIGKILL

    @property
    def pid(self) -> int:
        return self.popen.pid


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def resolve_argv(argv: tuple[str, ...]) -> list[str]:
    """``python`` as the first word means the interpreter running kvdoctor (its venv)."""
    out = list(argv)
    if out and out[0] == "python":
        out[0] = sys.executable
    return out


class Supervisor(contextlib.AbstractContextManager["Supervisor"]):
    """Owns every process of one run; leaving the ``with`` block tears them all down."""

    def __init__(
        self,
        log_dir: Path,
        *,
        grace_s: float = 10.0,
        base_env: Mapping[str, str] | None = None,
        latch: SignalLatch | None = None,
    ) -> None:
        self.log_dir = log_dir
        self.latch = latch
        self.grace_s = grace_s
        self.run_id = uuid.uuid4().hex
        inherited = dict(os.environ if base_env is None else base_env)
        self.dropped_env = sorted(k for k in inherited if k in CONTROL_ENV)  # never passed on: see the docstring
        self.base_env = {k: v for k, v in inherited.items() if k not in CONTROL_ENV}
        self.procs: list[Managed] = []
        self.survivors: list[str] = []  # "role (pid N)" / "escaped pid N (name)" alive after teardown
        self.adopted: dict[int, float] = {}  # orphans reparented to us (pid -> create_time)
        self.subreaper = False
        self._started_at = time.time()
        self._children_before: set[tuple[int, float]] = set()
        self._stack = contextlib.ExitStack()

    @property
    def warnings(self) -> list[str]:
        """What the user must hear about this run's processes: the inherited control variables dropped."""
        if not self.dropped_env:
            return []
        names = ", ".join(self.dropped_env)
        return [
            f"ignored {names} from kvdoctor's environment: kvdoctor sets its servers' control variables itself "
            "(a fault is injected only with --inject)"
        ]

    def __enter__(self) -> Supervisor:
        self._started_at = time.time()
        self._children_before = {(c.pid, _created(c)) for c in _children(psutil.Process())}
        self.subreaper = self._stack.enter_context(reaper.child_subreaper())
        return self

    # -- start and watch ---------------------------------------------------------------
    def start(self, role: str, argv: tuple[str, ...], env: Mapping[str, str]) -> Managed:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{role}.log"
        log_file = log_path.open("w", encoding="utf-8")
        log_file.write(f"# kvdoctor: {shlex.join(argv)}\n")
        log_file.flush()
        child_env = {**self.base_env, **env, RUN_MARKER_ENV: self.run_id}
        preexec = reaper.die_with_parent(PARENT_DEATH_SIGNAL) if PARENT_DEATH_SIGNAL else None
        with self.latch.held() if self.latch is not None else contextlib.nullcontext():
            try:
                popen = subprocess.Popen(
                    resolve_argv(argv),
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env=child_env,
                    start_new_session=True,
                    preexec_fn=preexec,
                )
            except OSError as exc:
                log_file.close()
                raise ServerExited(f"{role}: cannot start {shlex.join(argv)}: {exc}") from exc
            managed = Managed(role, popen, log_path, log_file)
            self.procs.append(managed)  # recorded before a held signal is raised: teardown stops it
        return managed

    def check_alive(self) -> None:
        """Raise ``Interrupted`` after a signal, else ``ServerExited`` (with the log tail) for the
        first process that has exited. The eval's watchdog calls this every 0.1 s."""
        if self.latch is not None:
            self.latch.check()
        for proc in self.procs:
            code = proc.popen.poll()
            if code is not None:
                raise ServerExited(
                    f"{proc.role} exited with code {code}; last lines of {proc.log_path}:\n{log_tail(proc.log_path)}"
                )
            self._remember_descendants(proc)
        self._remember_adopted()

    def wait_healthy(self, proc: Managed | None, url: str, deadline: float) -> None:
        """Poll ``url`` until 200, failing fast when the process exits or the deadline passes.

        For a process we started, a 200 counts only once that process (or a descendant, or an
        orphan reparented to us) is the one listening on the URL's port; until then we keep polling
        (a listener we cannot attribute is treated the same way) and at the deadline the failure
        says a foreign server answered. A request that times out on a listener outside that tree fails at once:
        the port was taken before the server bound it, and the server will never answer there.
        """
        port = _port_of(url)
        foreign = False
        with httpx.Client(verify=verify_for(url)) as client:
            while True:
                self.check_alive()
                timeout = max(POLL_INTERVAL_S, min(HEALTH_TIMEOUT_S, deadline - time.monotonic()))
                answered = silent = False
                try:
                    answered = client.get(url, timeout=timeout).status_code == 200
                except httpx.ReadTimeout:
                    silent = True  # a listener accepted and did not answer: ours (busy), or not
                except httpx.HTTPError:
                    pass
                if silent and proc is not None and not self.owns_listener(proc, port):
                    holders = listeners(port)
                    if holders:
                        raise ForeignServer(self._taken_message(proc, url, port, holders))
                if answered:
                    if proc is None or self.owns_listener(proc, port):
                        return
                    foreign = True
                if time.monotonic() >= deadline:
                    if foreign and proc is not None:
                        raise ForeignServer(_foreign_message(proc, url, port))
                    raise ServerUnhealthy(_unhealthy_message(proc, url))
                time.sleep(POLL_INTERVAL_S)

    def owns_listener(self, proc: Managed, port: int) -> bool:
        """Whether a process of ``proc``'s tree (or an orphan adopted from it) listens on ``port``."""
        self._remember_descendants(proc)
        self._remember_adopted()
        pids = {proc.pid, *proc.seen, *self.adopted}
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                for conn in psutil.Process(pid).net_connections(kind="inet"):
                    if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
                        return True
        return False

    def _taken_message(self, proc: Managed, url: str, port: int, holders: list[int | None]) -> str:
        """Who holds PORT instead of PROC: a pid, its name, and the role of the server it belongs to if ours."""
        whose: dict[int, str] = {}
        for other in self.procs:
            if other is not proc:
                whose |= dict.fromkeys([other.pid, *other.seen], f"of kvdoctor's {other.role} server")
        held = []
        for pid in holders:
            if pid is None:
                held.append("a process kvdoctor cannot name")
                continue
            try:
                name = psutil.Process(pid).name()
            except psutil.Error:
                name = "exited since"
            held.append(f"pid {pid} ({', '.join(filter(None, [name, whose.get(pid)]))})")
        return (
            f"{proc.role}: port {port} was taken before the server bound it: {' and '.join(held)} listens there "
            f"and does not answer {url}, so the server kvdoctor started (pid {proc.pid}) could not bind it; "
            f"last lines of {proc.log_path}:\n{log_tail(proc.log_path)}"
        )

    def _remember_descendants(self, proc: Managed) -> None:
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(proc.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    proc.seen.setdefault(child.pid, child.create_time())

    def _remember_adopted(self) -> None:
        """Our own children that we did not start: orphans of the servers, reparented to us."""
        managed = {p.pid for p in self.procs}
        for child in _children(psutil.Process()):
            created = _created(child)
            if (
                child.pid in managed
                or (child.pid, created) in self._children_before
                or created < self._started_at - 1.0
            ):
                continue
            self.adopted.setdefault(child.pid, created)
            with contextlib.suppress(psutil.Error):
                for below in child.children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        self.adopted.setdefault(below.pid, below.create_time())

    # -- teardown ----------------------------------------------------------------------
    def __exit__(self, *exc_info: object) -> None:
        try:
            self.teardown()
        finally:
            self._stack.close()

    def teardown(self) -> None:
        """Stop every group (SIGTERM, grace, SIGKILL), then sweep what escaped the groups.

        A second Ctrl-C or SIGTERM during teardown is ignored: half a teardown leaks processes.
        """
        with signals_ignored():
            self._teardown()

    def _teardown(self) -> None:
        for proc in self.procs:
            self._remember_descendants(proc)
            if proc.popen.poll() is not None:
                proc.ended = EXITED
        for proc in reversed(self.procs):
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for proc in reversed(self.procs):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
                proc.ended = proc.ended or SIGTERMED
        for proc in reversed(self.procs):
            _signal_group(proc.pid, signal.SIGKILL)  # also the group's members, leader gone or not
            try:
                proc.popen.wait(timeout=KILL_WAIT_S)
                proc.ended = proc.ended or SIGKILLED
            except subprocess.TimeoutExpired:
                proc.ended = SURVIVED
                self.survivors.append(f"{proc.role} (pid {proc.pid})")
            proc.log_file.close()
        self.sweep_escaped()

    def sweep_escaped(self) -> None:
        """Kill what left the groups; what still runs afterwards is recorded as a survivor."""
        self._remember_adopted()
        victims: list[psutil.Process] = []
        known = [(pid, created) for proc in self.procs for pid, created in proc.seen.items()]
        for pid, created in [*known, *self.adopted.items()]:
            with contextlib.suppress(psutil.Error):
                candidate = psutil.Process(pid)
                if candidate.create_time() == created:
                    victims.append(candidate)
        victims.extend(marked_processes(RUN_MARKER_ENV, self.run_id))
        for victim in victims:
            with contextlib.suppress(psutil.Error):
                _kill(victim)
        left = _wait_gone(victims, timeout_s=SWEEP_WAIT_S)
        self._reap_adopted()
        for victim in {v.pid: v for v in left}.values():
            self.survivors.append(f"escaped pid {victim.pid} ({_name(victim)})")

    def _reap_adopted(self) -> None:
        """Collect the exit status of adopted orphans that died (else they stay zombies of ours)."""
        for pid in self.adopted:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)


def marked_processes(key: str, value: str) -> list[psutil.Process]:
    """Live processes (ours excluded) whose environment has ``key=value``."""
    found = []
    me = os.getpid()
    for candidate in psutil.process_iter():
        if candidate.pid == me:
            continue
        with contextlib.suppress(psutil.Error):
            if _running(candidate) and candidate.environ().get(key) == value:
                found.append(candidate)
    return found


def listeners(port: int) -> list[int | None]:
    """The pids listening on PORT on any address (None: a process this user may not see); [] where the system's
    sockets cannot be read."""
    try:
        conns = psutil.net_connections(kind="inet")
    except psutil.Error:
        return []
    return list(
        dict.fromkeys(c.pid for c in conns if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port)
    )


def _wait_gone(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Until each process is gone or a zombie (an escapee's new parent may reap it late); returns
    those still running at the deadline."""
    deadline = time.monotonic() + timeout_s
    procs = [p for p in procs if _running(p)]
    while procs and time.monotonic() < deadline:
        time.sleep(POLL_INTERVAL_S / 10)
        procs = [p for p in procs if _running(p)]
    return procs


def _kill(proc: psutil.Process) -> None:
    proc.kill()


def _children(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return proc.children()
    except psutil.Error:
        return []


def _created(proc: psutil.Process) -> float:
    try:
        return proc.create_time()
    except psutil.Error:
        return 0.0


def _name(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())[:120] or proc.name()
    except psutil.Error:
        return "?"


def _port_of(url: str) -> int:
    parts = urllib.parse.urlsplit(url)
    return parts.port or (443 if parts.scheme == "https" else 80)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _unhealthy_message(proc: Managed | None, url: str) -> str:
    if proc is None:
        return f"{url} never answered 200 before the deadline"
    return f"{proc.role} never became healthy at {url}; last lines of {proc.log_path}:\n{log_tail(proc.log_path)}"


def _foreign_message(proc: Managed, url: str, port: int) -> str:
    return (
        f"{proc.role}: {url} answered, but not from the process kvdoctor started (pid {proc.pid}): "
        f"another server listens on port {port}; last lines of {proc.log_path}:\n"
        f"{log_tail(proc.log_path)}"
    )


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
