"""``kvdoctor pd-eval`` under hostile input: a foreign server on our port, malformed URLs, control
characters in names and paths, SIGTERM while the reports are written; misspelt or misplaced options
(before and after ``--``, in every mode), a malformed or reset retraction counter, credentials in a
URL, more questions than the data holds.

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
from click.testing import Result

from kvdoctor.deploy import ports, supervisor, urls
from kvdoctor.deploy.ports import free_ports
from kvdoctor.pd import render
from tests.pd.helpers import KNOB, KVDOCTOR, ROOT, STANDINS, Deploy, invoke, pd_args, result_json, run_dir

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
# arrives exactly while a report's temp file exists. argv[1]: "on", or "off" to switch the cleanup off
# (both layers: the writer's own SIGTERM unwinding, and main's SIGTERM raised as ``Interrupted``).
BLOCKING_PARQUET = [
    sys.executable,
    "-c",
    "import contextlib, pathlib, sys, time\n"
    "import pandas as pd\n"
    "import os, signal\n"
    "import kvdoctor.report.atomic as atomic\n"
    "def die(signum, frame):  # SIGTERM's default action, behind a handler: main's own SIGTERM layer stands aside\n"
    "    signal.signal(signum, signal.SIG_DFL)\n"
    "    os.kill(os.getpid(), signum)\n"
    "if sys.argv.pop(1) == 'off':\n"
    "    atomic.unwind_on_sigterm = contextlib.nullcontext\n"
    "    signal.signal(signal.SIGTERM, die)\n"
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


# --- kvdoctor's options before '--', the servers' flags after it ---------------------------------
#
# Click, told to pass unknown options on, once mixed them with the words after '--': a misspelt
# `--treshold 0.99` went into SGLang's launch line, or was dropped against external servers (the gate
# then ran at 0.80 and passed). Every word before '--' is kvdoctor's now, checked, in every mode.

DEAD_URLS = ("--router-url", "http://127.0.0.1:9", "--decode-url", "http://127.0.0.1:9")
MODES = {"dry-run": ("--dry-run",), "launch": (), "external": DEAD_URLS}


def one_error_line(run: Result) -> str:
    """The command's single stderr line (exit 2's contract), without its newline."""
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("kvdoctor: error: "), repr(run.stderr)
    return run.stderr.rstrip("\n")


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(
    ("words", "hint"),
    [
        (["--treshold", "0.99"], "unknown option --treshold: not a kvdoctor pd-eval option; did you mean --threshold?"),
        (["--treshold=0.99"], "unknown option --treshold: not a kvdoctor pd-eval option; did you mean --threshold?"),
        (["--thresh", "0.99"], "(abbreviations are not expanded); did you mean --threshold?"),  # a unique prefix
        (["--num-question", "50"], "did you mean --num-questions?"),
        (["--allow-no-retractions"], "did you mean --allow-no-retraction?"),
        (["--parallell", "4"], "did you mean --parallel?"),
        (["--threshold", "0.99", "--num-question", "50"], "unknown option --num-question"),  # after a valid value
        (["--mem-fraction-static", "0.8"], "--mem-fraction-static is an SGLang server flag"),  # '--' forgotten
        (["--enable-metric"], "did you mean --enable-metrics, an SGLang 0.5.23 server flag?"),
    ],
    ids=[
        "typo",
        "typo=",
        "prefix",
        "num-question",
        "allow-no-retractions",
        "parallell",
        "after-a-value",
        "sglang",
        "near-sglang",
    ],
)
def test_an_unknown_option_before_the_separator_is_refused_in_every_mode(
    tmp_path: Path, mode: str, words: list[str], hint: str
) -> None:
    out = tmp_path / "out"
    run = invoke(pd_args(out, *MODES[mode], *words))
    assert run.exit_code == 2, run.output
    assert hint in one_error_line(run)
    assert not out.exists()  # refused before anything started or was written


@pytest.mark.parametrize("words", [["--treshold", "0.99"], ["extra"]], ids=["typo", "stray-word"])
def test_the_console_script_refuses_in_one_line(tmp_path: Path, words: list[str]) -> None:
    """The same refusal through the installed entry point (``main``), not only Click's test runner."""
    out = tmp_path / "out"
    done = subprocess.run(
        [*KVDOCTOR, *pd_args(out, "--dry-run"), *words], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("kvdoctor: error: ")
    assert done.stdout == "" and not out.exists()


@pytest.mark.parametrize("where", ["before MODEL", "after MODEL"])
def test_options_are_checked_on_both_sides_of_model(tmp_path: Path, where: str) -> None:
    args = pd_args(tmp_path / "out", "--dry-run")
    good = ["--threshold", "0.42"]
    if where == "before MODEL":
        line = [args[0], *good, *args[1:]]
        typo = [args[0], "--treshold", "0.42", *args[1:]]  # Click once made MODEL '--treshold'
    else:
        line = [*args, *good]
        typo = [*args, "--treshold", "0.42"]
    run = invoke(line)
    assert run.exit_code == 0, run.output
    assert "threshold 0.42" in run.stdout  # a valid option is applied wherever it stands
    run = invoke(typo)
    assert run.exit_code == 2
    assert "unknown option --treshold" in one_error_line(run) and "did you mean --threshold?" in run.stderr


@pytest.mark.parametrize("mode", list(MODES))
def test_a_stray_word_before_the_separator_is_refused(tmp_path: Path, mode: str) -> None:
    args = pd_args(tmp_path / "out", *MODES[mode])
    run = invoke([*args[:2], "0.99", *args[2:]])
    assert run.exit_code == 2, run.output
    line = one_error_line(run)
    assert "unexpected argument '0.99' after MODEL 'stand-in/model'" in line and "after '--'" in line


@pytest.mark.parametrize("mode", ["dry-run", "launch"])
def test_a_typo_after_the_separator_is_refused_before_anything_starts(tmp_path: Path, mode: str) -> None:
    """What follows '--' is SGLang's, and checked as inspect checks it (SGLang 0.5.23's flags, their values):
    a misspelt server flag is exit 2 with a did-you-mean before any server starts, never a launch line
    carrying it (a dry run that shows it and exits 0 would be a green plan SGLang refuses)."""
    out = tmp_path / "out"
    extra = ("--dry-run", "--json") if mode == "dry-run" else ()
    run = invoke([*pd_args(out, *extra), "--", "--treshold", "0.99"])
    assert run.exit_code == 2, run.output
    line = one_error_line(run)
    assert "unknown option --treshold" in line and "did you mean --threshold?" in line
    assert not out.exists() and run.stdout == ""


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["--mem-fraction-static", "abc"], "invalid float value: 'abc'"),
        (["--mem-fraction-static=abc"], "invalid float value: 'abc'"),
        (["--kv-cache-dtype", "fp9"], "invalid choice: 'fp9'"),
        (["--not-an-sglang-flag", "1"], "unknown option --not-an-sglang-flag"),
        (["--kv-cache-dtype", "fp8_e4m3", "stray"], "unexpected word 'stray' after --"),
    ],
    ids=["bad-float", "bad-float-equals", "bad-choice", "unknown", "stray-word"],
)
def test_a_server_word_sglang_refuses_is_exit_2_before_launch(tmp_path: Path, words: list[str], expected: str) -> None:
    out = tmp_path / "out"
    run = invoke([*pd_args(out, "--dry-run", "--json"), "--", *words])
    assert run.exit_code == 2, run.output
    assert expected in one_error_line(run)
    assert run.stdout == ""


@pytest.mark.parametrize(
    ("words", "flag"),
    [
        (["--disaggregation-mo", "decode"], "--disaggregation-mode"),
        (["--tensor-parallel", "4"], "--tensor-parallel-size"),
        (["--tp-si", "4"], "--tp-size"),
        (["--base-gpu", "3"], "--base-gpu-id"),
        (["--disaggregation-bootstrap", "9000"], "--disaggregation-bootstrap-port"),
    ],
)
def test_an_abbreviated_plan_flag_after_the_separator_is_refused(tmp_path: Path, words: list[str], flag: str) -> None:
    """SGLang's argparse expands a unique prefix: `-- --disaggregation-mo decode` would turn the prefill
    into a second decode server behind a plan that says otherwise. It is the plan's flag, abbreviated."""
    run = invoke([*pd_args(tmp_path / "out", "--dry-run", "--json"), "--", *words])
    assert run.exit_code == 2, run.output
    line = one_error_line(run)  # what was typed, and the flag SGLang reads it as
    assert f"{words[0]} after -- would contradict the launch plan (SGLang reads it as " in line and flag in line


@pytest.mark.parametrize("mode", list(MODES))
def test_a_kvdoctor_option_after_the_separator_is_refused(tmp_path: Path, mode: str) -> None:
    out = tmp_path / "out"
    run = invoke([*pd_args(out, *MODES[mode]), "--", "--threshold", "0.99"])
    assert run.exit_code == 2, run.output
    assert "--threshold after '--' is kvdoctor's own option: put it before '--'" in one_error_line(run)
    assert not out.exists()


def test_server_flags_cannot_reach_external_servers(tmp_path: Path) -> None:
    """Against running servers nothing takes server flags: once dropped in silence, now refused; only
    --served-model-name (the model name the requests carry) is read."""
    out = tmp_path / "out"
    run = invoke([*pd_args(out, *DEAD_URLS), "--", "--mem-fraction-static", "0.8"])
    assert run.exit_code == 2, run.output
    assert "--mem-fraction-static after '--' cannot reach a server" in one_error_line(run)
    run = invoke([*pd_args(out, *DEAD_URLS, "--dry-run"), "--", "--served-model-name", "served"])
    assert run.exit_code == 0, run.output


def test_a_typo_cannot_switch_the_gate_off_against_external_servers(
    tmp_path: Path, deploy: Deploy, knobs: Callable[..., None]
) -> None:
    """The issue's case: a 0.9-accuracy deployment, `--threshold 0.99` fails it (exit 1), and so does
    `--threshold=0.99`; the typo `--treshold 0.99` once passed it at the default 0.80 (exit 0)."""
    knobs(ACCURACY="0.9")
    urls = deploy("--enable-metrics")
    external = ("--router-url", urls["router"], "--decode-url", urls["decode"])
    for spelling in (["--threshold", "0.99"], ["--threshold=0.99"]):
        out = tmp_path / spelling[0].replace("=", "_")
        run = invoke(pd_args(out, *external, *spelling))
        assert run.exit_code == 1, run.output
        assert result_json(out)["exit_reason"] == "accuracy_below_threshold"
    out = tmp_path / "typo"
    run = invoke(pd_args(out, *external, "--treshold", "0.99"))
    assert run.exit_code == 2, run.output
    assert "did you mean --threshold?" in one_error_line(run)
    assert not out.exists()


# --- the retraction counter: malformed or reset, named as such -----------------------------------


@pytest.mark.parametrize(
    ("served", "reason", "named"),
    [
        ("+Inf", "malformed_metric", "is +Inf, not a count"),  # once exit 3 internal_error OverflowError
        ("NaN", "malformed_metric", "is NaN, not a count"),  # once "the decode pool was too large"
        ("-1", "malformed_metric", "is -1, not a count"),
        ("9,3", "retraction_counter_reset", "went backwards during the eval (9 before it, 3 after)"),
    ],
    ids=["inf", "nan", "negative", "decreasing"],
)
def test_a_malformed_or_reset_retraction_counter_is_named(
    tmp_path: Path, knobs: Callable[..., None], served: str, reason: str, named: str
) -> None:
    knobs(DECODE_RETRACTED_METRIC=served)
    out = tmp_path / "out"
    run = invoke(pd_args(out))
    data = result_json(out)
    assert run.exit_code == 3, run.output  # the deployment's metrics failed, not a gate, not a kvdoctor bug
    assert data["exit_reason"] == reason and data["exit_code"] == 3
    assert "sglang:num_retracted_requests_total" in data["message"] and named in data["message"]
    assert "too large" not in run.output and "OverflowError" not in run.output


# --- credentials in URLs: refused, never echoed ---------------------------------------------------


@pytest.mark.parametrize("option", ["--router-url", "--decode-url", "--prefill-url"])
@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://alice:s3cret@127.0.0.1:80", "'http://alice:***@127.0.0.1:80': credentials"),
        ("http://alice:s3cret@[::1", "'http://alice:***@[::1': not a valid URL"),  # too malformed to parse
        ("https://s3cret@127.0.0.1:80", "'https://***@127.0.0.1:80': credentials"),  # a bare token
    ],
)
def test_a_url_with_credentials_is_refused_without_echoing_the_secret(
    tmp_path: Path, option: str, url: str, shown: str
) -> None:
    run = invoke(
        [*pd_args(tmp_path / "out", "--allow-no-retraction"), "--router-url", "http://127.0.0.1:9", option, url]
    )
    assert run.exit_code == 2, run.output
    assert f"{option} {shown}" in one_error_line(run)
    assert "s3cret" not in run.stdout + run.stderr


def test_masking_keeps_urls_without_credentials_whole() -> None:
    assert urls.masked("http://h:80/a@b") == "http://h:80/a@b"  # an '@' in the path is no credential
    assert urls.redact("GET 'http://u:p%40ss@h/x' (u:p@ss)", "http://u:p%40ss@h/x") == "GET 'http://u:***@h/x' (u:p@ss)"


# --- more questions than the data holds ---------------------------------------------------------


def with_questions(args: list[str], count: str) -> list[str]:
    """ARGS with --num-questions COUNT instead of pd_args' 24 (a repeated option is refused on its own)."""
    args[args.index("--num-questions") + 1] = count
    return args


@pytest.mark.parametrize("mode", list(MODES))
def test_more_questions_than_follow_the_shots_are_refused(tmp_path: Path, mode: str) -> None:
    """Once 5,000 asked meant 1,314 scored, in silence: less evidence than demanded, reported as a pass."""
    out = tmp_path / "out"
    run = invoke(with_questions(pd_args(out, *MODES[mode]), "5000"))
    assert run.exit_code == 2, run.output
    line = one_error_line(run)
    assert "--num-questions 5000: the data holds only 1,314 questions after the 5 shots" in line
    assert not out.exists()
    run = invoke(with_questions(pd_args(out, "--dry-run"), "1314"))  # every question there is: fine
    assert run.exit_code == 0 and "1314 questions" in run.stdout
