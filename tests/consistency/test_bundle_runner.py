"""A bundle's stand-alone ``run.py`` (kvdoctor/consistency/repro/run.py) under hostile input, run as a maintainer
runs it (its own process, kvdoctor not importable) against a test double of SGLang's HTTP API
(tests/consistency/bundle_sglang_double.py) that its ``bundle.json`` launches: a retraction counter that is no count
or goes backwards is no verdict (exit 3, one line), and SIGTERM or Ctrl-C with requests in flight stops every server
it started (exit 143, 130; nothing left listening)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvdoctor.consistency import bundle
from tests.consistency import bundle_sglang_double as double

RUN_PY = Path(bundle.__file__).parent / "repro" / "run.py"
DEADLINE_S = 30.0
BODIES = [
    {"input_ids": [11, 12, 13], "sampling_params": {"temperature": 0.0, "max_new_tokens": 5}, "return_logprob": True},
    {"input_ids": [14, 15, 16], "sampling_params": {"temperature": 0.0, "max_new_tokens": 5}, "return_logprob": True},
]


def _bundle(root: Path, **env: str) -> Path:
    """A bundle whose one server is the double (its tokens expected), with ENV for it."""
    root.mkdir()
    shutil.copy2(RUN_PY, root / "run.py")
    shutil.copy2(double.__file__, root / "double.py")
    spec = {
        "what": "a test double",
        "ports": 1,
        "steps": [
            {
                "role": "decode-pressured",
                "argv": ["{python}", "{bundle}/double.py", "--port", "{port0}"],
                "env": {"DOUBLE_STATE": "{bundle}/logs/double.json", **env},
                "health_url": "http://127.0.0.1:{port0}/health",
                "takes_extra_flags": True,
            }
        ],
        "generate_url": "http://127.0.0.1:{port0}/generate",
        "metrics_url": "http://127.0.0.1:{port0}/metrics",
        "retraction_counter": double.COUNTER,
        "warm_up": {**BODIES[0], "sampling_params": {"temperature": 0.0, "max_new_tokens": 4}},
        "bodies": BODIES,
        "concurrency": 2,
        "expected": [{"tokens": double.tokens(b), "logprobs": [double.LOGPROB] * 5} for b in BODIES],
        "observed": [],
        "logprob_tolerance": 1e-4,
        "stand_in_log": None,
    }
    (root / "bundle.json").write_text(json.dumps(spec), encoding="utf-8")
    return root


def _env(tmp_path: Path) -> dict[str, str]:
    """The environment of a machine without kvdoctor: a ``kvdoctor`` first on the path that refuses to import."""
    blocker = tmp_path / "blocker" / "kvdoctor"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('kvdoctor is not importable in this test')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVDOCTOR_")}
    env["PYTHONPATH"] = str(blocker.parent)
    return env


@contextlib.contextmanager
def _started(root: Path, env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """``python3 run.py`` in ROOT, in a session of its own; whatever is left of it and its server is killed after."""
    proc = subprocess.Popen(
        [sys.executable, str(root / "run.py")],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        state = root / "logs" / "double.json"
        if state.exists():  # the double runs in a session of run.py's making
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.killpg(json.loads(state.read_text())["pid"], signal.SIGKILL)
        proc.communicate(timeout=DEADLINE_S)


def _run(root: Path, env: dict[str, str]) -> tuple[int, str, str]:
    with _started(root, env) as proc:
        try:
            out, err = proc.communicate(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"run.py did not finish within {DEADLINE_S:.0f} s")
    return proc.returncode, out, err


@pytest.mark.parametrize(
    ("counter", "named"),
    [
        ("5.0,2.0", "went backwards during the run (5 before it, 2 after)"),
        ("0.0,NaN", "is NaN, not a count"),
        ("0.0,+Inf", "is +Inf, not a count"),
        ("-1.0,-1.0", "is -1.0, not a count"),
        ("0.0,three", "is three, not a count"),
    ],
)
def test_a_counter_that_is_no_count_or_went_backwards_is_no_verdict(tmp_path: Path, counter: str, named: str) -> None:
    """Issue 43, defect 13: 5 -> 2 printed "retractions counted: -3" and exited 0 ("identical with retractions
    counted"); NaN or +Inf gave a traceback and exit 1 ("reproduced"). kvdoctor makes all of them exit 3."""
    root = _bundle(tmp_path / "b", DOUBLE_COUNTER=counter)
    code, out, err = _run(root, _env(tmp_path))
    assert code == 3, (code, out, err)
    assert "Traceback" not in err and out == "", (out, err)
    said = [line for line in err.splitlines() if line.startswith("run.py:")]
    assert len(said) == 1 and named in said[0] and double.COUNTER in said[0], err
    assert "no verdict" in said[0]
    assert not (root / "result.json").exists()


@pytest.mark.parametrize(
    ("counter", "code", "said"),
    [
        ("-,3.0", 0, "identical to the reference: 2/2 requests identical; retractions counted: 3"),
        ("2.0,5.0", 0, "retractions counted: 3"),
        ("4.0,4.0", 2, "identical, but nothing was retracted: 2/2 requests identical; retractions counted: 0"),
        ("-,-", 2, "retractions counted: unknown"),
    ],
)
def test_a_counter_that_counts_still_gives_the_verdict(tmp_path: Path, counter: str, code: int, said: str) -> None:
    """The control: a fresh page without the sample counts as 0 before, a counter that rose counts the run."""
    root = _bundle(tmp_path / "b", DOUBLE_COUNTER=counter)
    got, out, err = _run(root, _env(tmp_path))
    assert got == code and said in out, (out, err)
    assert json.loads((root / "result.json").read_text())["exit_code"] == code


def test_the_counter_reader_reads_the_text_format_not_the_last_word() -> None:
    """A sample's labels may hold spaces, a sample may carry a timestamp, another metric may share the prefix."""
    run = _runner()
    page = (
        f"# HELP {double.COUNTER} x\n# TYPE {double.COUNTER} counter\n"
        f'{double.COUNTER}{{model_name="a b",dp_rank="0"}} 2.0 1700000000000\n'
        f'{double.COUNTER}{{model_name="a b",dp_rank="1"}} 3.0\n'
        f"{double.COUNTER}_other 99.0\n"
    )
    assert run.parse_retractions(page, double.COUNTER) == 5.0
    assert run.parse_retractions("# TYPE x counter\n", double.COUNTER) is None
    with pytest.raises(run.Uncountable, match="samples is \\+Inf, not a count"):
        run.parse_retractions(f"{double.COUNTER} 1e308\n{double.COUNTER} 1e308\n", double.COUNTER)  # sums to +Inf
    with pytest.raises(run.Uncountable, match="went backwards"):
        run.retracted(double.COUNTER, 5.0, 2.0)
    assert run.retracted(double.COUNTER, None, 3.0) == 3.0 and run.retracted(double.COUNTER, 3.0, None) is None


def _runner() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("repro_run_hostile", RUN_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> dict[str, Any]:
    """PATH's JSON once the double has written it (polled against a deadline; run.py must still be running)."""
    end = time.monotonic() + DEADLINE_S
    while time.monotonic() < end:
        if path.exists() and path.read_text():
            return json.loads(path.read_text())
        if proc.poll() is not None:
            pytest.fail(f"run.py exited with {proc.returncode} before the double held a request: {proc.stderr}")
        time.sleep(0.05)
    pytest.fail(f"the double held no request within {DEADLINE_S:.0f} s")


def _gone(pid: int) -> bool:
    """No process PID, or only its zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_with_requests_in_flight_stops_every_server(tmp_path: Path, signum: int, code: int) -> None:
    """Issue 43, defect 14: run.py waited for its requests in flight (a pool's shutdown) and ignored SIGTERM and
    Ctrl-C meanwhile; killed then, it left its server listening."""
    root = _bundle(tmp_path / "b", DOUBLE_HOLD="{bundle}/logs/held.json", DOUBLE_COUNTER="0.0")
    with _started(root, _env(tmp_path)) as proc:
        held = _wait_for(root / "logs" / "held.json", proc)
        assert _listening(held["port"])
        proc.send_signal(signum)
        try:
            _, err = proc.communicate(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"run.py did not exit within {DEADLINE_S:.0f} s of {signal.Signals(signum).name}")
        assert proc.returncode == code, err
        assert "Traceback" not in err, err
        assert f"run.py: {signal.Signals(signum).name}: stopping every server it started" in err
        end = time.monotonic() + DEADLINE_S  # run.py waited for it; a zombie's parent may still be reaping it
        while not _gone(held["pid"]) and time.monotonic() < end:
            time.sleep(0.05)
        assert _gone(held["pid"]), "the double outlived run.py"
        assert not _listening(held["port"]), "something still listens on the double's port"
