"""A fault file is read in a child interpreter, never in kvdoctor's process (issue 43, items 10, 12 and 18): what its
top does (exit, print, chdir, replace kvdoctor's code, hang) cannot touch the caller; a child that ends without its
answer is a :class:`FaultFileError`, never a pass; an edited file is read again; two threads read at once."""

from __future__ import annotations

import os
import queue
import select
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from kvdoctor.engines import fault_file
from kvdoctor.engines.faultkit import FaultFileError

WRAP = """
from kvdoctor.engines import faultkit

@faultkit.wrap("pkg.mod:Cls.fn", role="single")
def fault(original, *args, **kwargs):
    return original(*args, **kwargs)
"""


def gone(pid: int, timeout_s: float) -> bool:
    """Whether process PID has ended within TIMEOUT_S (its pidfd turns readable when it does)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout_s)[0])
    finally:
        os.close(fd)


def write(tmp_path: Path, top: str, name: str = "hostile.py", wrap: str = WRAP) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(top) + wrap, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("top", "said"),
    [
        ("import os\nos._exit(0)\n", "without an answer: it exited with status 0"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", "without an answer: it was killed by SIGKILL"),
        ("import sys\nprint('about to go')\nsys.stdout.flush()\nimport os\nos._exit(7)\n", "its last output: about"),
        ("import sys\nsys.exit(0)\n", "failed while it was read (line 2): SystemExit: 0"),
    ],
    ids=["os-exit-0", "sigkill", "os-exit-7", "sys-exit"],
)
def test_a_file_that_ends_its_reader_is_refused_never_a_pass(tmp_path: Path, top: str, said: str) -> None:
    path = write(tmp_path, top)
    with pytest.raises(FaultFileError) as caught:
        fault_file.read(path)
    assert said in str(caught.value) and str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_what_the_file_prints_never_reaches_the_callers_streams(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    top = "import sys, os\nprint('FORGED {}')\nsys.stderr.write('noise\\n')\nos.write(1, b'raw fd 1\\n')\n"
    found = fault_file.read(write(tmp_path, top))
    assert [(w.target, w.role) for w in found.wraps] == [("pkg.mod:Cls.fn", "single")]
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_a_file_that_prints_a_forged_answer_is_read_for_what_it_wraps(tmp_path: Path) -> None:
    """The answer comes on a descriptor of its own: a document printed to stdout is only output."""
    forged = '{"document": "kvdoctor-fault-file", "name": "x", "sha256": "0", "wraps": []}'
    found = fault_file.read(write(tmp_path, f"print({forged!r})\n"))
    assert found.name == "hostile" and found.describe() == "pkg.mod:Cls.fn (single)"


def test_a_chdir_at_the_top_does_not_move_the_caller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    fault_file.read(write(tmp_path, "import os\nos.chdir('/')\n"))
    assert Path.cwd() == here


def test_a_file_that_replaces_kvdoctors_code_replaces_nothing_here(tmp_path: Path) -> None:
    top = """
    import kvdoctor.engines.fault_file as reader
    import kvdoctor.consistency.fault_file as consistency
    consistency.NEEDS.clear()
    consistency.SERVER_ROLES.clear()
    reader.fault_name = lambda path: "forged"
    """
    found = fault_file.read(write(tmp_path, top))
    from kvdoctor.consistency import fault_file as consistency

    assert found.name == "hostile" and fault_file.fault_name(Path("x/a.py")) == "a"
    assert consistency.NEEDS["prefill"] == "--topology pd" and consistency.SERVER_ROLES["single"]


def test_the_reader_runs_the_file_with_kvdoctors_path_and_the_callers_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "helper_of_mine.py").write_text("TARGET = 'pkg.mod:Cls.fn'\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))  # a module the caller can import, the file imports at its top
    wrap = WRAP.replace('"pkg.mod:Cls.fn"', "helper_of_mine.TARGET")
    top = f"import helper_of_mine, os\nassert os.getcwd() == {str(tmp_path)!r}\n"
    assert fault_file.read(write(tmp_path, top, wrap=wrap)).describe() == "pkg.mod:Cls.fn (single)"


def test_a_file_still_running_at_the_timeout_is_refused_and_its_reader_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    top = f"import os, threading\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\nthreading.Event().wait()\n"
    with pytest.raises(FaultFileError, match=r"was still being read after 2 s"):
        fault_file.read(write(tmp_path, top), timeout_s=2)
    assert not Path(f"/proc/{pid_file.read_text()}").exists()  # killed and reaped before read returned


def test_a_process_the_file_starts_does_not_outlive_its_read(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    top = f"""
    import subprocess, sys
    stay = subprocess.Popen([sys.executable, "-c", "import threading; threading.Event().wait()"])
    open({str(pid_file)!r}, "w").write(str(stay.pid))
    """
    fault_file.read(write(tmp_path, top))
    assert gone(int(pid_file.read_text()), 10)


def test_a_caller_killed_while_a_file_is_read_takes_the_reader_with_it(tmp_path: Path) -> None:
    """A caller of the API with no handler of its own: SIGTERM ends it on the spot (no ``finally`` runs), and the
    reading child dies with it (its parent-death signal), never an orphan still running the file."""
    fifo = tmp_path / "pid.fifo"
    os.mkfifo(fifo)
    top = f"import os, threading\nwith open({str(fifo)!r}, 'w') as fh:\n    fh.write(str(os.getpid()))\n"
    path = write(tmp_path, top + "threading.Event().wait()\n")
    code = "import signal; signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"  # a runner that ignores it: not here
    code += f"from kvdoctor.engines import fault_file; fault_file.read({str(path)!r})"
    caller = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        box: list[str] = []
        taker = threading.Thread(target=lambda: box.append(fifo.read_text(encoding="utf-8")), daemon=True)
        taker.start()
        taker.join(timeout=60)
        assert box, "the reader never started"
        caller.send_signal(signal.SIGTERM)
        assert caller.wait(timeout=30) == -signal.SIGTERM
    finally:
        if caller.poll() is None:
            caller.kill()
    assert gone(int(box[0]), 10)


def test_an_edited_file_is_read_again(tmp_path: Path) -> None:
    path = write(tmp_path, "")
    assert fault_file.read(path).describe() == "pkg.mod:Cls.fn (single)"
    stat = path.stat()
    path.write_text(path.read_text().replace("Cls.fn", "Cls.gn"), encoding="utf-8")  # the same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same mtime: only the bytes changed
    assert fault_file.read(path).describe() == "pkg.mod:Cls.gn (single)"
    second = WRAP.replace("Cls.fn", "Cls.hn").replace("def fault", "def other")
    path.write_text(path.read_text() + second, encoding="utf-8")
    assert fault_file.read(path).describe() == "pkg.mod:Cls.gn (single), pkg.mod:Cls.hn (single)"


def test_an_unchanged_file_is_not_run_again(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    path = write(tmp_path, f"open({str(runs)!r}, 'a').write('x')\n")
    first = fault_file.read(path)
    assert fault_file.read(path) == first and runs.read_text() == "x"
    assert fault_file.cached(path, first.sha256) == first


def at_once(fifo: Path, calls: list[Callable[[], object]]) -> list[object]:
    """CALLS (two) on two threads at once; what each returned or raised, in order. The callers' fault files meet at
    FIFO (one opens it to write, the other to read: each open blocks until the other end opens), so both finish only
    if both ran at the same time; a thread still blocked at the end is let go (the FIFO opened at both ends)."""
    done: queue.Queue[tuple[int, object]] = queue.Queue()

    def run(i: int, call: Callable[[], object]) -> None:
        try:
            done.put((i, call()))
        except BaseException as exc:
            done.put((i, exc))

    threads = [threading.Thread(target=run, args=(i, c), daemon=True) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    got: dict[int, object] = {}
    try:
        while len(got) < len(calls):
            i, value = done.get(timeout=60)
            got[i] = value
            if isinstance(value, BaseException):
                raise value
    finally:
        for flags in (os.O_RDONLY | os.O_NONBLOCK,):  # a writer still waiting for its reader goes on
            os.close(os.open(fifo, flags))
    return [got[i] for i in range(len(calls))]


def test_two_threads_read_fault_files_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "meet"
    os.mkfifo(fifo)
    one = write(tmp_path, f"open({str(fifo)!r}, 'w').write('hi')\n", name="writer.py")
    two = write(tmp_path, f"assert open({str(fifo)!r}).read() == 'hi'\n", name="reader.py")
    found = at_once(fifo, [lambda: fault_file.read(one, timeout_s=30), lambda: fault_file.read(two, timeout_s=30)])
    assert [f.name for f in found if isinstance(f, fault_file.FaultFile)] == ["writer", "reader"]


def test_the_fault_is_named_after_the_file_a_symlink_leads_to(tmp_path: Path) -> None:
    real = write(tmp_path, "", name="swap_slots.py")
    (tmp_path / "links").mkdir()
    link = tmp_path / "links" / "current.py"
    link.symlink_to(real)
    found = fault_file.read(link)
    assert (found.name, found.path, found.given) == ("swap_slots", real.resolve(), link)
    assert found.shown == f"{link} -> {real.resolve()}"
    assert fault_file.env_value("single", link) == f"single:{real.resolve()}"
    bad = tmp_path / "links" / "ok.py"
    bad.symlink_to(write(tmp_path, "", name="not a name.py"))
    with pytest.raises(FaultFileError, match=r"rename the file \(where .*ok\.py leads"):
        fault_file.read(bad)
