"""``kvdoctor consistency --fault-file`` under hostile input (issue 43, items 10, 11, 18 and 20): a file read where it
cannot touch kvdoctor (an ``os._exit`` is exit 2, never a stale green; a print never reaches ``--json``; a signal
while it is read is 130/143 with the reading child gone; the plugin's session fails), a symlinked file armed under the
name its servers log, two threads checking at once, and the file's own record in the JSON and in the state trace's
finding (its disagreement is the fault's, not SGLang's)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace as NS

import pytest
from rich.console import Console

from kvdoctor._exceptions import EXIT_GATE, EXIT_PASS, InputError
from kvdoctor.cli.consistency import print_result
from kvdoctor.consistency import attribution, deploy, fault_file, gates
from kvdoctor.consistency.prepared import ConsistencyOptions
from kvdoctor.consistency.report import json_document
from kvdoctor.consistency.result import ConsistencyResult, settled
from kvdoctor.consistency.servers.sglang import deployment as sglang_room
from kvdoctor.consistency.workload import Workload
from kvdoctor.engines import arming, hook_log
from kvdoctor.engines import fault_file as reader
from tests.consistency.test_attribution import PROMPTS, _cycle, _diff, _write
from tests.engines.test_fault_file import DOUBLE, FAKE, LOG_ENV, fake_server  # noqa: F401 (the fixture)
from tests.engines.test_fault_file_isolation import at_once, gone
from tests.schema_check import assert_valid

REPO = Path(__file__).resolve().parents[2]
# A real run's preflight needs the server environment in the running Python (kvdoctor.core.environments) before it
# reads the fault file: the runs below that are no dry run use its interpreter, and are skipped without it.
SERVER_PYTHON = REPO / ".venv-server" / "bin" / "python"
needs_server_env = pytest.mark.skipif(not SERVER_PYTHON.exists(), reason="no .venv-server (make server-env)")

WRAP = """from kvdoctor.engines import faultkit

@faultkit.wrap("pkg.mod:Cls.fn", role="single")
def fault(original, *args, **kwargs):
    return original(*args, **kwargs)
"""


def kvdoctor(*args: str, cwd: Path, python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-m", "kvdoctor", "consistency", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        check=False,
    )


# ---- item 10: read where it cannot touch kvdoctor -----------------------------------------------------------------
EXITED = "exiter.py ended the process that read it without an answer: it exited with status 0"


def _refused_in_one_line(done: subprocess.CompletedProcess[str]) -> None:
    lines = done.stderr.strip().splitlines()
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert len(lines) == 1 and lines[0].startswith("kvdoctor: error: --fault-file ") and EXITED in lines[0]


def test_a_file_that_exits_its_reader_is_exit_2_not_an_empty_0(tmp_path: Path) -> None:
    (tmp_path / "exiter.py").write_text("import os\nos._exit(0)\n", encoding="utf-8")
    done = kvdoctor("llama-3.1-8b", "--shrink", "--json", "--dry-run", "--fault-file", "exiter.py", cwd=tmp_path)
    _refused_in_one_line(done)


@needs_server_env
def test_a_file_that_exits_its_reader_is_exit_2_with_no_stale_green_junit(tmp_path: Path) -> None:
    (tmp_path / "exiter.py").write_text("import os\nos._exit(0)\n", encoding="utf-8")
    junit = tmp_path / "j.xml"
    junit.write_text('<testsuite tests="1" failures="0"><testcase name="green"/></testsuite>', encoding="utf-8")
    done = kvdoctor(
        "llama-3.1-8b", "--shrink", "--json", "--junit", "j.xml", "--fault-file", "exiter.py", "--output-dir", "out",
        cwd=tmp_path, python=str(SERVER_PYTHON),
    )  # fmt: skip
    _refused_in_one_line(done)
    (case,) = ET.parse(junit).getroot().iter("testcase")
    error = case.find("error")
    assert error is not None and "without an answer" in error.get("message", "")  # this run's error, not a green
    assert not (tmp_path / "out").exists()


def test_what_the_file_prints_never_reaches_the_json_on_stdout(tmp_path: Path) -> None:
    top = "import os, sys\nprint('{\"forged\": 1}')\nos.write(1, b'raw\\n')\nsys.stdout.flush()\n"
    (tmp_path / "loud.py").write_text(top + WRAP, encoding="utf-8")
    done = kvdoctor("llama-3.1-8b", "--shrink", "--fault-file", "loud.py", "--dry-run", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)  # the document alone: nothing the file printed
    steps = {s["role"]: s["env"] for s in doc["deployment"]["steps"]}
    assert steps["pressured"][reader.FAULT_FILE_ENV] == f"single:{tmp_path.resolve() / 'loud.py'}"
    assert "forged" not in done.stdout + done.stderr and "raw" not in done.stdout + done.stderr


def test_a_file_that_replaces_a_kvdoctor_check_cannot_disable_it(tmp_path: Path) -> None:
    """In kvdoctor's own process this file emptied the role table the check reads: exit 4 KeyError, or no check."""
    top = "import kvdoctor.consistency.fault_file as ff\nff.NEEDS.clear()\nff.SERVER_ROLES.clear()\n"
    path = tmp_path / "sneaky.py"
    path.write_text(top + WRAP.replace('role="single"', 'role="prefill"'), encoding="utf-8")
    with pytest.raises(InputError, match="role prefill, which needs --topology pd; this run is --topology single"):
        fault_file.check(ConsistencyOptions("llama-3.1-8b", fault_file=path))
    assert fault_file.SERVER_ROLES["single"] == {"pressured": "single"}


def _pid_from(fifo: Path, box: list[int]) -> threading.Thread:
    """A thread that opens FIFO (blocking until the file's top opens it to write) and reads the pid it writes."""

    def take() -> None:
        with fifo.open(encoding="utf-8") as fh:
            box.append(int(fh.read()))

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    return thread


# ``python -m kvdoctor ARGS`` as started from a terminal: Ctrl-C raises KeyboardInterrupt and SIGTERM is not ignored,
# even where this test's own runner ignores them (a background job's children inherit that, and Python keeps it).
AS_A_TERMINAL_RUNS_IT = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "signal.signal(signal.SIGTERM, signal.SIG_DFL); "
    "sys.argv = ['kvdoctor', *sys.argv[1:]]; runpy.run_module('kvdoctor', run_name='__main__', alter_sys=True)"
)


@pytest.mark.parametrize(
    ("signum", "code", "word"), [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "")], ids=["term", "int"]
)
def test_a_signal_while_the_file_is_read_ends_kvdoctor_with_its_code_and_the_reader_with_it(
    tmp_path: Path, signum: int, code: int, word: str
) -> None:
    fifo = tmp_path / "pid.fifo"
    os.mkfifo(fifo)
    top = f"import os, threading\nwith open({str(fifo)!r}, 'w') as fh:\n    fh.write(str(os.getpid()))\n"
    (tmp_path / "slow.py").write_text(top + "threading.Event().wait()\n" + WRAP, encoding="utf-8")
    box: list[int] = []
    taker = _pid_from(fifo, box)
    args = ["consistency", "llama-3.1-8b", "--shrink", "--dry-run", "--fault-file", "slow.py"]
    run = subprocess.Popen(
        [sys.executable, "-c", AS_A_TERMINAL_RUNS_IT, *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        taker.join(timeout=90)
        assert box, "the fault file's reader never started"
        (child,) = box
        with open(f"/proc/{child}/stat", encoding="utf-8") as fh:
            assert int(fh.read().rsplit(")", 1)[1].split()[1]) == run.pid  # kvdoctor's own child, reading it
        run.send_signal(signum)
        out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == code, err
    assert out == "" and "Traceback" not in err and (not word or f"kvdoctor: {word}" in err)
    assert gone(child, 10), f"the reading child {child} outlived kvdoctor"


PLUGIN_PROJECT = """
def test_my_fault(kvdoctor_consistency):
    assert kvdoctor_consistency("llama-3.1-8b", shrink=True, fault_file={path!r}).passed  # a str, as a user writes

def test_after_it():
    pass
"""


@needs_server_env
def test_inside_a_projects_pytest_run_the_session_fails_with_its_junit(tmp_path: Path) -> None:
    """The plugin's fixture (kvdoctor.api.consistency in the project's own pytest process): the file's ``os._exit``
    ended the whole session with 0 after a failed test, and no --junitxml; now that test fails on its InputError."""
    exiter = tmp_path / "exiter.py"
    exiter.write_text("import os\nos._exit(0)\n", encoding="utf-8")
    (tmp_path / "test_project.py").write_text(PLUGIN_PROJECT.format(path=str(exiter)), encoding="utf-8")
    argv = [str(SERVER_PYTHON), "-m", "pytest", "-p", "kvdoctor", "--junitxml=junit.xml", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*argv, "-q", "test_project.py"], capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False
    )
    assert done.returncode == 1, done.stdout[-3000:]
    assert "1 failed, 1 passed" in done.stdout and "ended the process that read it without an answer" in done.stdout
    suite = ET.parse(tmp_path / "junit.xml").getroot()
    assert [c.get("name") for c in suite.iter("testcase")] == ["test_my_fault", "test_after_it"]


def test_two_threads_check_fault_files_at_once(tmp_path: Path) -> None:
    """Each file's top waits for the other's (a FIFO: each open blocks until the other end opens)."""
    fifo = tmp_path / "meet"
    os.mkfifo(fifo)
    one, two = tmp_path / "writer.py", tmp_path / "reader.py"
    one.write_text(f"open({str(fifo)!r}, 'w').write('hi')\n" + WRAP, encoding="utf-8")
    two.write_text(f"assert open({str(fifo)!r}).read() == 'hi'\n" + WRAP, encoding="utf-8")
    checked = at_once(fifo, [lambda p=p: fault_file.check(ConsistencyOptions("m", fault_file=p)) for p in (one, two)])
    assert [o.fault_file for o in checked if isinstance(o, ConsistencyOptions)] == [one.resolve(), two.resolve()]


# ---- item 11: a symlinked file is armed under the name its servers log ------------------------------------------
def test_a_symlinked_file_is_armed_under_the_name_the_server_logs(
    tmp_path: Path,
    fake_server: Path,  # noqa: F811 (the fixture)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = tmp_path / "faults" / "double_step.py"
    real.parent.mkdir()
    body = textwrap.dedent(DOUBLE).replace('role="prefill"', 'role="single"').replace("Engine.decode", "Engine.helper")
    real.write_text(body, encoding="utf-8")
    link = tmp_path / "mine.py"
    link.symlink_to(real)
    o = ConsistencyOptions("lfm2-1.2b", shrink=True, fault_file=link)  # as the run holds it: the link, as given
    assert fault_file.check(o).fault_file == real.resolve()
    planned = fault_file.place(
        deploy.build(deploy.DeployOptions("/m", "single", "cpu", Workload(), has_recurrent=True), list(range(8))),
        o,
        tmp_path / "run",
    )
    (step,) = [s for s in planned.steps if reader.FAULT_FILE_ENV in s.env]
    for key in (reader.FAULT_FILE_ENV, arming.ARM_ENV):  # the pressured server's environment, as planned
        monkeypatch.setenv(key, step.env[key])
    (tmp_path / "run").mkdir()
    from kvdoctor.engines.sglang import server_hooks

    server_hooks.install()  # the server's start-up: its site hook reads KVDOCTOR_FAULT_FILE
    import importlib

    engine = importlib.import_module(FAKE).Engine()
    arming.arm(Path(planned.arm_file or ""), fault_file.name(o) or "")  # what the run arms before the burst
    assert engine.step(3) == 8  # it fired: the arm file names the fault under the name the server gave it
    assert engine.helper(2) == 20  # the second wrap (it changes nothing, but it is a firing)
    log = hook_log.read(fake_server)
    (loaded,) = log.details("fault-file-loaded")
    assert loaded.split(" ")[0] == fault_file.name(o) == "double_step"
    judged = fault_file.judge(o, log, settled(_result()))
    assert judged.exit_code == EXIT_PASS and judged.gates[-1].message.startswith("fault file double_step fired: ")


# ---- item 20: the file's own record, and its disagreement is its own ---------------------------------------------
def _result(*gs: gates.Gate) -> ConsistencyResult:
    r = ConsistencyResult("lfm2-1.2b", "lfm2", "single", "cpu", True, Workload().to_dict())
    return replace(r, gates=list(gs) or [gates.Gate("tokens", True, "passed", "ok")])


def test_the_json_carries_the_files_record_and_validates(tmp_path: Path) -> None:
    path = tmp_path / "mine.py"
    path.write_text(WRAP + WRAP.replace("Cls.fn", "Cls.gn").replace("def fault", "def other"), encoding="utf-8")
    sha = fault_file.read(path).sha256
    lines = [
        f"fault-file-loaded mine role=single wraps=2 sha256={sha} {path}",
        "fault-installed mine pkg.mod:Cls.fn single",
        "fault-fired mine pkg.mod:Cls.fn single x=3",
        "fault-fired mine pkg.mod:Cls.fn single x=4",
        "fault-unchanged mine pkg.mod:Cls.fn single nothing to do",
    ]
    judged = fault_file.judge(
        ConsistencyOptions("m", fault_file=path),
        hook_log.parse(f"7 {line}" for line in lines),
        settled(_result(gates.Gate("tokens", False, "diverged", "1/8"))),
    )
    assert judged.exit_code == EXIT_GATE and judged.exit_reason == "no_teeth"  # Cls.gn never installed
    assert judged.fault_file == {
        "name": "mine",
        "path": str(path.resolve()),
        "given": str(path),
        "sha256": sha,
        "loaded": 1,
        "refused": None,
        "wraps": [
            {"target": "pkg.mod:Cls.fn", "role": "single", "installed": True, "fired": 2, "unchanged": 1},
            {"target": "pkg.mod:Cls.gn", "role": "single", "installed": False, "fired": 0, "unchanged": 0},
        ],
    }
    doc = assert_valid(json_document(judged), "consistency")
    assert doc["fault"] is None and doc["fault_file"]["wraps"][0]["fired"] == 2
    assert assert_valid(json_document(_result()), "consistency")["fault_file"] is None
    shown = io.StringIO()
    print_result(Console(file=shown, width=300), judged)
    assert (
        f"fault file mine ({path.resolve()}): loaded by 1 server process; pkg.mod:Cls.fn (single) fired 2, 1 "
        "unchanged, pkg.mod:Cls.gn (single) never installed"
    ) in shown.getvalue()


def test_the_servers_version_is_judged_not_an_edit_made_during_the_run(tmp_path: Path) -> None:
    path = tmp_path / "mine.py"
    path.write_text(WRAP, encoding="utf-8")
    sha = fault_file.read(path).sha256  # what the check read, and the servers ran
    path.write_text(WRAP + WRAP.replace("Cls.fn", "Cls.gn").replace("def fault", "def other"), encoding="utf-8")
    lines = [
        f"fault-file-loaded mine role=single wraps=1 sha256={sha} {path}",
        "fault-installed mine pkg.mod:Cls.fn single",
        "fault-fired mine pkg.mod:Cls.fn single",
    ]
    judged = fault_file.judge(
        ConsistencyOptions("m", fault_file=path), hook_log.parse(f"7 {line}" for line in lines), settled(_result())
    )
    assert judged.exit_code == EXIT_PASS and judged.fault_file and judged.fault_file["sha256"] == sha
    path.unlink()  # gone after the run, and never read in the version the log names: red, not an exit 2
    unknown = [line.replace(sha, "0" * 64) for line in lines]
    judged = fault_file.judge(
        ConsistencyOptions("m", fault_file=path), hook_log.parse(f"7 {line}" for line in unknown), settled(_result())
    )
    assert (judged.exit_code, judged.exit_reason) == (EXIT_GATE, "fault_failed")
    assert "cannot be read after the run" in judged.gates[0].message


def test_over_pd_the_state_traces_disagreement_is_the_fault_files_not_sglangs(tmp_path: Path) -> None:
    _write(tmp_path / attribution.DIGEST_LOG, _cycle(0, 1.0, forward={"full_kv": "aa:100", "conv_state": "ee:40"}))
    (tmp_path / sglang_room.HOOK_LOG).write_text("1 fault-fired restore_hook sglang.x:Req.load_kv_cache decode\n")
    path = tmp_path / "restore_hook.py"
    path.write_text(WRAP.replace('role="single"', 'role="decode"'), encoding="utf-8")
    o = ConsistencyOptions("lfm2-1.2b", topology="pd", fault_file=path)
    r = replace(_result(), topology="pd", requests=[_diff(0, True, 3)])
    said: list[str] = []
    traced = sglang_room.trace(NS(options=o, prompts=PROMPTS), tmp_path, r, lambda _p, m: said.append(m))
    finding = traced.state_trace.finding if traced.state_trace else None
    assert finding and (finding["injected"], finding["injected_by"]) == ("restore_hook", "--fault-file")
    assert finding["cite"] == [] and finding["unrequested"] is None
    assert finding["sentence"].startswith("the fault's: your --fault-file restore_hook was installed on this path")
    (request,) = traced.state_trace.requests if traced.state_trace else []
    assert request.verdict == "rewritten" and request.cite == [] and "your --fault-file restore_hook" in request.detail
    assert "sglang/srt/" not in " ".join(said)
    blamed = sglang_room.trace(NS(options=replace(o, fault_file=None), prompts=PROMPTS), tmp_path, r, print)
    assert blamed.state_trace and blamed.state_trace.finding and blamed.state_trace.finding["injected"] is None
    assert blamed.state_trace.finding["unrequested"]  # control: without the file the event is nobody's
