"""``kvdoctor pd-eval`` under hostile input: a foreign server on our port, malformed URLs, control
characters in names and paths, SIGTERM while the reports are written.

Each test asserts the exact exit code and that nothing was lost (the foreign server still serves,
no run directory appeared when nothing should start, no temp file stays, no process is left: the
``no_leftovers`` fixture). Each protection has a twin that switches it off and sees the failure.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from kvdoctor.pd import ports, render, supervisor, urls
from kvdoctor.pd.ports import free_ports
from tests.pd.helpers import KNOB, ROOT, STANDINS, invoke, pd_args, result_json, run_dir

pytestmark = pytest.mark.usefixtures("no_leftovers")


def wait_until(predicate: Callable[[], bool], timeout_s: float = 60.0) -> None:
    """Poll a condition with a deadline (synchronising on observable state, never on a delay)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def answers(url: str) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(url, timeout=5).status_code == 200
    return False


@pytest.fixture
def listener() -> Iterator[int]:
    """A port something else already listens on (a bare socket of this test)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize("option", ["--prefill-port", "--decode-port", "--router-port", "--bootstrap-port"])
def test_pinned_port_in_use_is_refused_before_anything_starts(tmp_path: Path, listener: int, option: str) -> None:
    run = invoke(pd_args(tmp_path / "out", option, str(listener)))
    assert run.exit_code == 2, run.output
    assert run.stderr.count("\n") == 1
    assert f"{option} {listener} is already in use on 127.0.0.1" in run.stderr
    assert not (tmp_path / "out").exists()  # nothing started, nothing written
    with socket.create_connection(("127.0.0.1", listener), timeout=5):
        pass  # the other listener is untouched


def test_without_the_port_check_a_pinned_port_in_use_fails_late(
    tmp_path: Path, listener: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Teeth: unchecked, the run starts servers and ends as a deployment failure (exit 3)."""
    monkeypatch.setattr(ports, "check_free", lambda *_: None)
    run = invoke(pd_args(tmp_path / "out", "--decode-port", str(listener), "--timeout", "20"))
    assert run.exit_code == 3, run.output
    assert result_json(tmp_path / "out")["exit_reason"] in ("server_exited", "foreign_server")


@pytest.fixture
def foreign_decode(tmp_path: Path) -> Iterator[str]:
    """A stand-in decode server somebody else runs, started before the knobs of the test are set."""
    port = free_ports(1)[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith(KNOB)}
    log = (tmp_path / "foreign.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            str(STANDINS / "server.py"),
            "--model-path",
            "stand-in/model",
            "--disaggregation-mode",
            "decode",
            "--enable-metrics",
            "--port",
            str(port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: answers(url + "/health"))
        yield url
    finally:
        proc.kill()
        proc.wait()
        log.close()


@pytest.mark.parametrize("attribution", ["on", "off"])
def test_a_foreign_server_on_our_port_is_not_healthy(
    tmp_path: Path,
    foreign_decode: str,
    knobs: Callable[..., None],
    monkeypatch: pytest.MonkeyPatch,
    attribution: str,
) -> None:
    """Our decode is still loading (never binds); another server answers /health on its port.

    The port check is bypassed here (the port was taken after it: a race), so only the listener
    attribution stands between the run and a false PASS; with it off, the run passes on the
    foreign server ("decode: healthy"), which is the defect.
    """
    port = int(foreign_decode.rsplit(":", 1)[1])
    knobs(DECODE_NEVER_LISTEN="1")
    monkeypatch.setattr(ports, "check_free", lambda *_: None)
    if attribution == "off":
        monkeypatch.setattr(supervisor.Supervisor, "owns_listener", lambda *_: True)
    out = tmp_path / "out"
    run = invoke(pd_args(out, "--decode-port", str(port), "--timeout", "10"))
    if attribution == "off":
        assert run.exit_code == 0 and "decode: healthy" in run.output  # the false pass
        return
    data = result_json(out)
    assert run.exit_code == 3, run.output
    assert data["exit_reason"] == "foreign_server" and data["passed"] is False
    assert f"another server listens on port {port}" in data["message"]
    assert "decode: healthy" not in run.output and "prefill: healthy" in run.output
    assert answers(foreign_decode + "/health")  # the foreign server was left alone


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://127.0.0.1:21", "scheme must be http or https"),
        ("http://[::1", "not a valid URL"),
        ("http://127.0.0.1:99999", "Port out of range"),
        ("http://127.0.0.1:0", "port must be within 1..65535"),
        ("http://", "no host"),
        ("http://bad host:80", "whitespace"),
        ("http://user:pw@127.0.0.1:80", "credentials"),
    ],
)
def test_malformed_urls_exit_2_at_once(tmp_path: Path, url: str, reason: str) -> None:
    started = time.monotonic()
    run = invoke([*pd_args(tmp_path / "out", "--allow-no-retraction"), "--router-url", url])
    assert run.exit_code == 2, run.output
    assert run.stderr.count("\n") == 1 and reason in run.stderr and "--router-url" in run.stderr
    assert time.monotonic() - started < 30  # not retried until --timeout
    assert not (tmp_path / "out").exists()


def test_without_url_validation_an_ftp_router_is_retried_until_the_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Teeth: unchecked, ``ftp://`` is polled until --timeout and reported as exit 3."""
    monkeypatch.setattr(urls, "check_base_url", lambda _option, url: url)
    run = invoke(
        [*pd_args(tmp_path / "out", "--allow-no-retraction", "--timeout", "1"), "--router-url", "ftp://127.0.0.1:21"]
    )
    assert run.exit_code == 3


@pytest.mark.parametrize("protected", [True, False])
def test_control_characters_never_reach_the_terminal(
    tmp_path: Path, knobs: Callable[..., None], monkeypatch: pytest.MonkeyPatch, protected: bool
) -> None:
    """A model name and an output path with ANSI sequences and rich markup, and a server log tail
    that repeats them: shown as inert text, never as escape codes."""
    knobs(PREFILL_EXIT_AT_START="7")
    if not protected:
        monkeypatch.setattr(render, "plain", lambda text: str(text))
    out = tmp_path / "out\x1b[2J"
    args = pd_args(out)
    args[1] = "evil\x1b[31m[bold red]model[/]\x07"
    run = invoke(args)
    assert run.exit_code == 3
    if not protected:
        assert "\x1b[" in run.stdout
        return
    for stream in (run.stdout, run.stderr):
        assert not any(ch in stream for ch in "\x1b\x07\r"), repr(stream)
    assert "evil[bold red]model[/]" in run.stdout  # shown literally, markup not applied
    assert result_json(out)["model"] == args[1]  # the JSON keeps the exact value (escaped by JSON)


# kvdoctor as a separate process whose parquet writer blocks after its first bytes: SIGTERM then
# arrives exactly while a report's temp file exists. argv[1]: "on", or "off" to switch the cleanup off.
BLOCKING_PARQUET = [
    sys.executable,
    "-c",
    "import contextlib, pathlib, sys, time\n"
    "import pandas as pd\n"
    "import kvdoctor.report.atomic as atomic\n"
    "if sys.argv.pop(1) == 'off':\n"
    "    atomic.unwind_on_sigterm = contextlib.nullcontext\n"
    "ready = pathlib.Path(sys.argv.pop(1))\n"
    "def blocking(self, fh, *args, **kwargs):\n"
    "    fh.write(b'PAR1 half a table')\n"
    "    fh.flush()\n"
    "    ready.write_text('writing')\n"
    "    time.sleep(3600)\n"
    "pd.DataFrame.to_parquet = blocking\n"
    "from kvdoctor.cli.app import main\n"
    "main()\n",
]


@pytest.mark.parametrize("cleanup", ["on", "off"])
def test_sigterm_while_writing_reports_leaves_no_temp_file(tmp_path: Path, cleanup: str) -> None:
    out, ready = tmp_path / "out", tmp_path / "ready"
    proc = subprocess.Popen(
        [*BLOCKING_PARQUET, cleanup, str(ready), *pd_args(out)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(ready.exists)
        temps = list(run_dir(out).glob(".questions.parquet.*.tmp"))
        assert len(temps) == 1  # the window the test is about
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    left = sorted(p.name for p in run_dir(out).iterdir())
    if cleanup == "off":
        assert code == -signal.SIGTERM and temps[0].exists()  # the old leak
        temps[0].unlink()
        return
    assert code == 128 + signal.SIGTERM
    assert not any(name.endswith(".tmp") for name in left), left
    assert {"result.json", "questions.csv"} <= set(left) and "questions.parquet" not in left
